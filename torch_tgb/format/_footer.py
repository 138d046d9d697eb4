"""The TGB footer and trailer: encoding, and parsing of untrusted bytes.

The footer is a small binary structure (see ``docs/format.md``)::

    footer header   32 B   "TGBF" | version u16 | flags u16 | dp u32 | cp u32
                           | num_slices u32 | num_tensors u32 | num_dims u32 | meta_len u32
    meta JSON       meta_len B, then zero padding to a multiple of 8
                           {"names": [...], "layout": {...}|null, "schema": {...}, "metadata": {...}}
    slice table     num_slices x 32 B   dp u32 | cp u32 | start u64 | end u64 | first u32 | count u32
    tensor table    num_tensors x 32 B  name u32 | dtype u8 | ndim u8 | codec u16 | dims u32
                                        | crc32c u32 | offset u64 | length u64
    dims            num_dims x i64

    trailer         24 B   footer_length u64 | footer_crc32c u32 | format_version u32 | magic 8 B

Parsing is one ``np.frombuffer`` per table plus vectorised bounds checks, so it costs microseconds
even for thousands of slices; the per-tensor Python objects of a slice are built only when that
slice is asked for (:class:`Footer`, ``_footer_view.py``), and the shape/length agreement is checked
then. Every size read from the bytes is bounded by the object's size before anything is allocated
from it. No pickle, no eval: JSON is parsed with the standard library and its depth is bounded.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from torch_tgb.errors import CorruptObject
from torch_tgb.format._checks import check_tables, json_depth
from torch_tgb.format._codecs import Codec, codec_table
from torch_tgb.format._contract import Contract
from torch_tgb.format._crc import crc32c_of
from torch_tgb.format._footer_view import Footer, SliceInfo, TensorInfo
from torch_tgb.format._records import (
    MAX_RECORD_TENSORS,
    build_records,
    check_record_layout,
    meta_bytes,
    record_width,
    records_of,
    slice_record,
)
from torch_tgb.format._spec import (
    _DIM,
    _HEADER,
    _SLICE_ROW,
    _TENSOR_ROW,
    _TRAILER,
    CODEC_VERSION,
    FOOTER_MAGIC,
    FORMAT_VERSION,
    FORMAT_VERSIONS,
    MAX_JSON_DEPTH,
    MAX_META_BYTES,
    MAX_NDIM,
    SLICE_ALIGN,
    TENSOR_ALIGN,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    V3_SLICE_ALIGN,
)
from torch_tgb.layout import offsets_key

__all__ = [
    "FOOTER_MAGIC",
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "MAX_NDIM",
    "SLICE_ALIGN",
    "TENSOR_ALIGN",
    "TRAILER_MAGIC",
    "TRAILER_SIZE",
    "V3_SLICE_ALIGN",
    "Footer",
    "SliceInfo",
    "TensorInfo",
    "crc32c_of",
    "encode_footer",
    "footer_from_records",
    "parse_footer",
    "parse_trailer",
]


# --- encoding ------------------------------------------------------------------


def encode_footer(
    *,
    dp: int,
    cp: int,
    slices: Sequence[tuple[int, int, int, int, Sequence[TensorInfo]]],
    layout: Mapping[str, Any] | None,
    schema: Mapping[str, Any],
    metadata: Mapping[str, Any],
    ragged: Sequence[str] = (),
    footer_offset: int | None = None,
    key: str = "",
    codecs: Sequence[str] = (),
) -> bytes:
    """Footer body followed by the trailer. ``slices``: (dp, cp, start, end, tensors).

    With ``footer_offset`` (where the footer will lie in its object): version
    3, the tables as one record per slice (``_records.py``; every slice must
    hold the same tensors, which the writer checks), their CRCs bound to the
    object's ``key``; version 4 when ``codecs`` (the specs a tensor's ``codec`` may be,
    numbered from 1 in its row) are given. Without: version 1 unless there are
    ``ragged`` keys (version 2), as older writers wrote.
    """
    if codecs and footer_offset is None:
        raise ValueError("codecs need a version-4 footer (give footer_offset)")
    numbers = {spec: k + 1 for k, spec in enumerate(codecs)}
    names: list[str] = []
    name_ids: dict[str, int] = {}
    srows = np.zeros(len(slices), dtype=_SLICE_ROW)
    ntensors = sum(len(s[4]) for s in slices)
    trows = np.zeros(ntensors, dtype=_TENSOR_ROW)
    dims: list[int] = []
    ti = 0
    for si, (sdp, scp, start, end, tensors) in enumerate(slices):
        srows[si] = (sdp, scp, start, end, ti, len(tensors))
        for t in tensors:
            if t.name not in name_ids:
                name_ids[t.name] = len(names)
                names.append(t.name)
            codec = 0 if t.codec is None else numbers[t.codec.spec]
            trows[ti] = (name_ids[t.name], t._dt.code, len(t.shape), codec, len(dims), t.crc32c, t.offset, t.length)
            dims.extend(t.shape)
            ti += 1
    doc: dict[str, Any] = {"names": names, "layout": layout, "schema": schema, "metadata": metadata}
    if ragged:
        doc["ragged"] = sorted(ragged)
    if codecs:
        doc["codecs"] = list(codecs)
    meta = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    if footer_offset is not None:
        version = CODEC_VERSION if codecs else FORMAT_VERSION
        return _encode_v3(dp, cp, srows, trows, dims, meta, footer_offset, key, version)
    version = 2 if ragged else 1
    header = _HEADER.pack(FOOTER_MAGIC, version, 0, dp, cp, len(slices), ntensors, len(dims), len(meta))
    body = b"".join(
        [
            header,
            meta,
            bytes(-len(meta) % 8),
            srows.tobytes(),
            trows.tobytes(),
            np.asarray(dims, dtype=_DIM).tobytes(),
        ]
    )
    trailer = _TRAILER.pack(len(body), crc32c_of(body), version, TRAILER_MAGIC)
    return body + trailer


def _encode_v3(dp: int, cp: int, srows: np.ndarray, trows: np.ndarray, dims: list[int], meta: bytes,
               footer_offset: int, key: str, version: int) -> bytes:
    """A version-3 (or 4) footer: ``header | records | meta | padding`` and the trailer."""
    n = len(srows)
    tensors, ndims = len(trows) // n, len(dims) // n
    if tensors * n != len(trows) or ndims * n != len(dims):
        raise ValueError("a version-3 footer needs the same tensors, of the same dims, in every slice")
    header = _HEADER.pack(FOOTER_MAGIC, version, 0, dp, cp, n, len(trows), len(dims), len(meta))
    records = build_records(srows, trows, np.asarray(dims, dtype=_DIM), tensors=tensors, ndims=ndims,
                            footer_offset=footer_offset, meta_crc=crc32c_of(meta), key=key)
    body = b"".join([header, records, meta, bytes(-len(meta) % 8)])
    return body + _TRAILER.pack(len(body), crc32c_of(body), version, TRAILER_MAGIC)


# --- parsing -----------------------------------------------------------------


_Meta = tuple[list[str], dict[str, Any] | None, dict[str, Any], dict[str, Any], tuple[str, ...], tuple[Codec, ...]]


@functools.lru_cache(maxsize=256)
def _parse_meta(raw: bytes, version: int) -> _Meta | str:
    """The footer's meta JSON, validated: (names, layout, schema, metadata, ragged, codecs), or what is wrong with it.

    Consecutive TGBs of one stream carry the same meta bytes, so it is
    decoded once per distinct value, not once per TGB (the parsed dicts are
    shared by those footers and must not be mutated).
    """
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as e:
        return f"footer metadata is not valid JSON: {e}"
    if not isinstance(meta, dict):
        return "footer metadata must be a JSON object"
    names = meta.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "footer metadata has no list of tensor names"
    layout, schema, metadata = meta.get("layout"), meta.get("schema", {}), meta.get("metadata", {})
    if not (layout is None or isinstance(layout, dict)) or not isinstance(schema, dict):
        return "footer layout/schema are not JSON objects"
    if not isinstance(metadata, dict):
        return "footer metadata is not a JSON object"
    # layout/schema have a fixed shape; only user metadata can nest arbitrarily
    if metadata and json_depth(metadata, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return f"footer metadata nests deeper than {MAX_JSON_DEPTH}"
    ragged = meta.get("ragged", [])
    if not isinstance(ragged, list) or not all(isinstance(k, str) and k in names and offsets_key(k) in names
                                                 for k in ragged):
        return "footer ragged keys are not names of the object with their offsets"
    if ragged and version < 2:
        return f"footer of format version {version} names ragged keys (they need version 2)"
    codecs = codec_table(meta.get("codecs"), version)
    if isinstance(codecs, str):
        return codecs
    return names, layout, schema, metadata, tuple(ragged), codecs


def _v3_tables(
    body: bytes | memoryview, where: str, nslices: int, ntensors: int, ndims: int, meta_len: int, length: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bytes]:
    """The three tables of a version-3 footer (views of its records) and its meta bytes, sizes checked."""
    if nslices < 1:
        raise CorruptObject(f"{where}: footer sizes are inconsistent ({nslices=})")
    tensors, dims_each = divmod(ntensors, nslices), divmod(ndims, nslices)
    if tensors[1] or dims_each[1] or not 0 < tensors[0] <= MAX_RECORD_TENSORS:
        raise CorruptObject(f"{where}: footer sizes are inconsistent ({nslices=}, {ntensors=}, {ndims=}): "
                            "a version-3 footer holds the same tensors in every slice")
    width = record_width(tensors[0], dims_each[0])
    meta_at = _HEADER.size + nslices * width
    if meta_len > MAX_META_BYTES or meta_at + meta_len + (-meta_len % 8) != length:
        raise CorruptObject(
            f"{where}: footer sizes are inconsistent ({nslices=}, {ntensors=}, {ndims=}, {meta_len=}, {length=})"
        )
    records = records_of(body, nslices=nslices, tensors=tensors[0], ndims=dims_each[0])
    meta = bytes(body[meta_at : meta_at + meta_len])
    problem = check_record_layout(records, 0, tensors[0], dims_each[0])
    if problem is None and (records["tail"]["meta_crc"] != crc32c_of(meta)).any():
        problem = "a slice record names another meta"
    if problem is not None:
        raise CorruptObject(f"{where}: {problem}")
    return records["slice"], records["tensors"].reshape(-1), records["dims"].reshape(-1), meta


def parse_trailer(tail: bytes, *, key: str, size: int) -> tuple[int, int]:
    """``(footer_offset, footer_length)`` from the last ``TRAILER_SIZE`` bytes of ``tail``."""
    if size < TRAILER_SIZE or len(tail) < TRAILER_SIZE:
        raise CorruptObject(f"object {key!r}: truncated, {size} bytes is smaller than the trailer")
    length, _crc, version, magic = _TRAILER.unpack(tail[-TRAILER_SIZE:])
    if magic != TRAILER_MAGIC:
        raise CorruptObject(f"object {key!r}: not a TGB object (bad magic {magic!r}) or truncated")
    if version not in FORMAT_VERSIONS:
        raise CorruptObject(
            f"object {key!r}: unknown TGB format version {version} (this reader knows {list(FORMAT_VERSIONS)}): "
            "written by a newer torch_tgb; upgrade to read it"
        )
    if length < _HEADER.size or length > size - TRAILER_SIZE:
        raise CorruptObject(f"object {key!r}: footer length {length} does not fit in an object of {size} bytes")
    return size - TRAILER_SIZE - length, length


#: footers up to this size are copied out of a mapping before parsing (a typical one is < 1 KiB)
_COPY_FOOTER_BYTES = 64 << 10


def parse_footer(
    data: bytes | memoryview, *, key: str, size: int, footer_offset: int, contract: Contract | None = None
) -> Footer:
    """Parse footer body + trailer (``data`` = bytes ``[footer_offset, size)``).

    ``contract``: the namespace's (``dataset.json``); a footer that disagrees
    with it raises :class:`CorruptObject`, and the footer keeps it to judge
    each slice when first asked for (:class:`~torch_tgb.format._contract.Contract`).
    """
    where = f"object {key!r}"
    if len(data) != size - footer_offset:
        raise CorruptObject(f"{where}: truncated footer, got {len(data)} of {size - footer_offset} bytes")
    if not isinstance(data, bytes) and len(data) <= _COPY_FOOTER_BYTES:
        # a view of a mapping: numpy and CRC calls on a small private copy are several times cheaper
        data = bytes(data)
    found_offset, length = parse_trailer(bytes(data[-TRAILER_SIZE:]), key=key, size=size)
    if found_offset != footer_offset:
        raise CorruptObject(
            f"{where}: footer location disagrees: expected offset {footer_offset}, trailer says {found_offset}"
        )
    body = data[:length] if isinstance(data, bytes) else memoryview(data)[:length]
    _, crc, trailer_version, _ = _TRAILER.unpack(bytes(data[-TRAILER_SIZE:]))
    if crc32c_of(body) != crc:
        raise CorruptObject(f"{where}: footer CRC32C mismatch (footer corrupted)")
    magic, version, _flags, dp, cp, nslices, ntensors, ndims, meta_len = _HEADER.unpack_from(body, 0)
    if magic != FOOTER_MAGIC:
        raise CorruptObject(f"{where}: bad footer magic {magic!r}")
    if version not in FORMAT_VERSIONS:
        raise CorruptObject(f"{where}: unknown footer version {version} (this reader knows {list(FORMAT_VERSIONS)})")
    if version != trailer_version:  # the writer writes one version in both: a footer judged by the wrong rules
        raise CorruptObject(f"{where}: footer header says format version {version}, its trailer {trailer_version}")
    if version >= 3:
        srows, trows, dims, meta_raw = _v3_tables(body, where, nslices, ntensors, ndims, meta_len, length)
    else:
        meta_end = _HEADER.size + meta_len
        meta_padded = meta_end + (-meta_len % 8)
        expected = meta_padded + nslices * _SLICE_ROW.itemsize + ntensors * _TENSOR_ROW.itemsize + ndims * 8
        if meta_len > MAX_META_BYTES or expected != length:
            raise CorruptObject(
                f"{where}: footer sizes are inconsistent ({nslices=}, {ntensors=}, {ndims=}, {meta_len=}, {length=})"
            )
        meta_raw = bytes(body[_HEADER.size : meta_end])
        pos = meta_padded
        srows = np.frombuffer(body, dtype=_SLICE_ROW, count=nslices, offset=pos)
        pos += srows.nbytes
        trows = np.frombuffer(body, dtype=_TENSOR_ROW, count=ntensors, offset=pos)
        pos += trows.nbytes
        dims = np.frombuffer(body, dtype=_DIM, count=ndims, offset=pos)
    if dp < 1 or cp < 1 or dp * cp != nslices:
        raise CorruptObject(f"{where}: footer says dp={dp}, cp={cp} but holds {nslices} slices")
    parsed = _parse_meta(meta_raw, version)
    if isinstance(parsed, str):
        raise CorruptObject(f"{where}: {parsed}")
    names, layout, schema, metadata, ragged, codecs = parsed
    align = V3_SLICE_ALIGN if version >= 3 else SLICE_ALIGN
    check_tables(where, srows, trows, dims, names, cp, footer_offset, align=align)
    footer = Footer(
        key=key,
        size=size,
        footer_offset=footer_offset,
        footer_length=length,
        dp=dp,
        cp=cp,
        names=tuple(names),
        layout=layout,
        schema=schema,
        metadata=metadata,
        slices=srows,
        tensors=trows,
        dims=dims,
        ragged=ragged,
        contract=contract,
        version=version,
        codecs=codecs,
    )
    if contract is not None:
        problem = contract.footer_problem(footer)
        if problem is not None:
            raise CorruptObject(f"{where}: {problem}")
    return footer


def footer_from_records(
    records: dict[int, bytes | memoryview], meta: bytes | memoryview, *, key: str, size: int, footer_offset: int,
    width: int, dp: int, cp: int, contract: Contract | None = None,
) -> Footer:
    """A version-3 footer holding only the slices whose records were read (index -> ``width`` bytes).

    Each record is checked alone (its CRC, its place, its numbering: ``_records.slice_record``) and by the
    same table checks as a whole footer, with the meta it names (``meta``: the padded meta region; its CRC
    must be the records'). The footer's ``slice()`` answers for those slices only.
    """
    where = f"object {key!r}"
    if not records:
        raise ValueError("footer_from_records needs at least one record")
    held = sorted(records)
    recs = [slice_record(records[i], key=key, index=i, width=width, footer_offset=footer_offset, where=where)
            for i in held]
    meta_crcs = {int(r["tail"]["meta_crc"][0]) for r in recs}
    if len(meta_crcs) != 1:
        raise CorruptObject(f"{where}: slice records of one TGB name different footer metas")
    parsed = _parse_meta(meta_bytes(meta, meta_crc=meta_crcs.pop(), where=where), CODEC_VERSION)
    if isinstance(parsed, str):
        raise CorruptObject(f"{where}: {parsed}")
    names, layout, schema, metadata, ragged, codecs = parsed
    version = CODEC_VERSION if codecs else FORMAT_VERSION  # no trailer is read here: the meta says which
    tensors = int(recs[0]["slice"]["count"][0])
    ndims = len(recs[0]["dims"][0])
    if any(int(r["slice"]["count"][0]) != tensors or len(r["dims"][0]) != ndims for r in recs):
        raise CorruptObject(f"{where}: slice records of one TGB differ in width")
    srows = np.concatenate([r["slice"] for r in recs])
    trows = np.concatenate([r["tensors"][0] for r in recs])
    dims = np.concatenate([r["dims"][0] for r in recs])
    for local, index in enumerate(held):  # numbered as if these were the only slices, in this order
        srows["first"][local] = local * tensors
        trows["dims"][local * tensors : (local + 1) * tensors] -= (index - local) * ndims
    _check_held(where, srows, trows, dims, names, cp, footer_offset, held, tensors, ndims)
    footer = Footer(key=key, size=size, footer_offset=footer_offset, footer_length=size - footer_offset - TRAILER_SIZE,
                    dp=dp, cp=cp, names=tuple(names), layout=layout, schema=schema, metadata=metadata, slices=srows,
                    tensors=trows, dims=dims, ragged=ragged, contract=contract, indices=tuple(held),
                    version=version, codecs=codecs)
    if contract is not None:
        problem = contract.footer_problem(footer)
        if problem is not None:
            raise CorruptObject(f"{where}: {problem}")
    return footer


def _check_held(where: str, srows: np.ndarray, trows: np.ndarray, dims: np.ndarray, names: list[str], cp: int,
                data_end: int, held: list[int], tensors: int, ndims: int) -> None:
    """The table checks of a whole footer, slice by slice (the held slices need not be adjacent)."""
    for local, index in enumerate(held):
        rows = trows[local * tensors : (local + 1) * tensors].copy()
        rows["dims"] -= local * ndims  # this record's dims alone
        one = srows[local : local + 1].copy()
        one["first"] = 0
        check_tables(where, one, rows, dims[local * ndims : (local + 1) * ndims], names, cp, data_end,
                     align=V3_SLICE_ALIGN, first_index=index)
