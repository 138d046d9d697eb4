"""Version-3 slice records: the footer's tables as one fixed-width record per slice, each checkable alone.

A version-3 footer body is ``header 32 B | records | meta JSON | zero padding to 8``,
and record ``i`` (slice ``i`` in (dp, cp) order) lies at a place a reader
computes from the manifest entry alone (its ``slice_record``, the record's
width ``R``)::

    footer_offset + 32 + i * R        R = 32 + 32 T + 8 D + 8
    ┌────────────┬─────────────────────┬────────────┬───────────┬──────────────┐
    │ slice row  │ T tensor rows       │ D dims i64 │ crc u32   │ meta_crc u32 │
    │ 32 B       │ 32 B each           │            │           │              │
    └────────────┴─────────────────────┴────────────┴───────────┴──────────────┘

``T`` tensors per slice and ``D`` dims in all are the same for every slice of
an object (the slice row's ``count`` is ``T``; ``D`` is the sum of its tensor
rows' ``ndim``). The rows are those of versions 1-2 with global numbering
(``first = i * T``, a tensor row's ``dims`` index ``i * D + j``), so the
records read as one array are exactly the three tables a full parse checks.
``crc`` is the CRC32C of the record's bytes before its tail, followed by the
object's key (UTF-8, relative to the namespace), the TGB's ``footer_offset``
(u64), ``i`` (u32) and ``meta_crc`` (u32): a record read alone is checked,
and bound to its place (copied to another slot, TGB or object it fails). ``meta_crc`` is the CRC32C of the meta JSON, so a
reader that holds a meta with that CRC (one per stream, usually) need not
read it again.

A rank thus reads ``R`` bytes of footer per slice it reads (about 170 for
token rows), whatever ``dp * cp``: O(1) instead of the whole footer
(``docs/format.md``, *Version 3*).
"""

from __future__ import annotations

import struct
import numpy as np

from torch_tgb.errors import CorruptObject
from torch_tgb.format._crc import crc32c_of
from torch_tgb.format._spec import _HEADER, _SLICE_ROW, _TENSOR_ROW, MAX_NDIM, record_dtype

__all__ = [
    "MAX_RECORD_TENSORS",
    "build_records",
    "check_record_layout",
    "meta_bytes",
    "meta_range",
    "record_crcs",
    "record_range",
    "record_width",
    "records_of",
    "slice_record",
]

_PLACE = struct.Struct("<QII")  # footer_offset, index, meta_crc: what a record's CRC binds it to
#: most tensors one slice's record may describe (a real TGB has a handful)
MAX_RECORD_TENSORS = 4096


def record_width(tensors: int, dims: int) -> int:
    """``R``: bytes of one record of ``tensors`` tensors holding ``dims`` dims in all."""
    return int(record_dtype(tensors, dims).itemsize)


def _place(key: str, footer_offset: int, index: int, meta_crc: int) -> bytes:
    return key.encode() + _PLACE.pack(footer_offset, index, meta_crc)


def build_records(
    srows: np.ndarray, trows: np.ndarray, dims: np.ndarray, *, tensors: int, ndims: int, footer_offset: int,
    meta_crc: int, key: str,
) -> bytes:
    """The records of a footer's three tables (each slice owns ``tensors`` rows and ``ndims`` dims), CRCs filled."""
    n = len(srows)
    records = np.zeros(n, dtype=record_dtype(tensors, ndims))
    records["slice"] = srows
    records["tensors"] = trows.reshape(n, tensors)
    records["dims"] = np.asarray(dims, dtype=np.int64).reshape(n, ndims)
    records["tail"]["meta_crc"] = meta_crc
    raw = records.view(np.uint8).reshape(n, -1)
    body = raw.shape[1] - 8
    crcs = [crc32c_of(raw[i, :body].tobytes() + _place(key, footer_offset, i, meta_crc)) for i in range(n)]
    records["tail"]["crc"] = crcs
    return records.tobytes()


def records_of(body: bytes | memoryview, *, nslices: int, tensors: int, ndims: int) -> np.ndarray:
    """The records region of a version-3 footer ``body`` as a structured array (no copy)."""
    return np.frombuffer(body, dtype=record_dtype(tensors, ndims), count=nslices, offset=_HEADER.size)


def record_crcs(records: np.ndarray, *, key: str, footer_offset: int, first_index: int = 0) -> np.ndarray:
    """Whether each record's CRC holds (bool per record; ``records`` are records ``first_index ..`` of ``key``)."""
    raw = records.view(np.uint8).reshape(len(records), -1)
    body = raw.shape[1] - 8
    got = records["tail"]["crc"].tolist()
    meta = records["tail"]["meta_crc"].tolist()
    return np.array([crc32c_of(raw[i, :body].tobytes() + _place(key, footer_offset, first_index + i, meta[i]))
                     == got[i] for i in range(len(records))], dtype=bool)


def check_record_layout(records: np.ndarray, first_index: int, tensors: int, ndims: int) -> str | None:
    """What is wrong with records ``first_index ..`` (their numbering, their tensor rows' dims), or None."""
    idx = np.arange(first_index, first_index + len(records), dtype=np.int64)
    s = records["slice"]
    if (s["first"].astype(np.int64) != idx * tensors).any() or (s["count"] != tensors).any():
        return "a slice record's tensor rows are not its own"
    t = records["tensors"]
    at = t["dims"].astype(np.int64) - (idx * ndims)[:, None]
    nd = t["ndim"].astype(np.int64)
    if (nd > MAX_NDIM).any() or (at < 0).any() or (at + nd > ndims).any() or (nd.sum(axis=1) != ndims).any():
        return "a slice record's dims are not its own"
    return None


def record_range(footer_offset: int, index: int, width: int, count: int = 1) -> tuple[int, int]:
    """Bytes ``[start, end)`` of records ``index .. index + count - 1`` of a TGB whose footer is at ``footer_offset``."""
    start = footer_offset + _HEADER.size + index * width
    return start, start + count * width


def meta_range(footer_offset: int, footer_length: int, nslices: int, width: int) -> tuple[int, int]:
    """Bytes ``[start, end)`` of the meta JSON and its zero padding (the rest of the footer body)."""
    return footer_offset + _HEADER.size + nslices * width, footer_offset + footer_length


def slice_record(
    raw: bytes | memoryview, *, key: str, index: int, width: int, footer_offset: int, where: str,
) -> np.ndarray:
    """Record ``index`` from its ``width`` bytes, once its CRC, numbering and width hold (else CorruptObject)."""
    if len(raw) != width or width < _SLICE_ROW.itemsize + 8:
        raise CorruptObject(f"{where}: slice record {index} is {len(raw)} bytes, the entry says {width}")
    srow = np.frombuffer(raw, dtype=_SLICE_ROW, count=1)
    tensors = int(srow["count"][0])
    if not 0 < tensors <= MAX_RECORD_TENSORS or _SLICE_ROW.itemsize + tensors * _TENSOR_ROW.itemsize + 8 > width:
        raise CorruptObject(f"{where}: slice record {index} claims {tensors} tensors in {width} bytes")
    trows = np.frombuffer(raw, dtype=_TENSOR_ROW, count=tensors, offset=_SLICE_ROW.itemsize)
    ndims = int(trows["ndim"].astype(np.int64).sum())
    if record_width(tensors, ndims) != width:
        raise CorruptObject(f"{where}: slice record {index}: {tensors} tensors of {ndims} dims do not make "
                            f"{width} bytes")
    record = np.frombuffer(raw, dtype=record_dtype(tensors, ndims), count=1)
    if not record_crcs(record, key=key, footer_offset=footer_offset, first_index=index)[0]:
        raise CorruptObject(f"{where}: slice record {index}: CRC32C mismatch (corrupted, or not this TGB's)")
    problem = check_record_layout(record, index, tensors, ndims)
    if problem is not None:
        raise CorruptObject(f"{where}: slice record {index}: {problem}")
    return record


def meta_bytes(raw: bytes | memoryview, *, meta_crc: int, where: str) -> bytes:
    """The meta JSON from its padded bytes, once its CRC32C is the records' ``meta_crc``."""
    data = bytes(raw).rstrip(b"\0")
    if crc32c_of(data) != meta_crc:
        raise CorruptObject(f"{where}: footer meta CRC32C does not match its slice records")
    return data
