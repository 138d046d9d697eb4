"""Encoding a dense batch as one TGB without a Python object per slice: cost nearly independent of dp x cp.

:func:`encode_tgb` takes the slices :meth:`Layout.cut` makes, one Python
object per (dp, cp) slice and per tensor: at dp 1024 x cp 8 that is 8,192
slices and seconds of bookkeeping for a payload of a few megabytes. When
every tensor of the batch is dense, every slice has the same tensors of the
same shapes, so the object's geometry is arithmetic: slice ``i`` starts at
``first + i * stride`` and each tensor sits at the same offset inside it.
:func:`encode_grid` then fills the payload with one strided copy per tensor
(per cp chunk for a sequence key), builds the footer's tables with numpy,
and leaves only the CRC32Cs as a loop of C calls. The bytes are exactly those
of ``encode_tgb(layout.cut(batch), ...)`` (a property test holds them equal);
a batch with ragged keys takes that path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np
import torch

from torch_tgb.format._crc import crc32c_of
from torch_tgb.format._dtypes import DType
from torch_tgb.format._records import _PLACE, record_width
from torch_tgb.format._spec import (
    _HEADER,
    _TRAILER,
    FOOTER_MAGIC,
    FORMAT_VERSION,
    PAGE_ALIGN_FROM,
    SLICE_ALIGN,
    TENSOR_ALIGN,
    TRAILER_MAGIC,
    V3_SLICE_ALIGN,
    record_dtype,
)
from torch_tgb.layout import Layout, cp_ranges

__all__ = ["encode_grid"]


@dataclass(frozen=True)
class _Key:
    """One tensor of every slice: its source, where it sits in a slice, and its slice shape."""

    name: str
    source: np.ndarray  # the batch tensor's bytes: [dp, rows, seq, inner bytes] for a seq key, else [dp, bytes]
    dt: DType
    shape: tuple[int, ...]  # of the tensor in one slice
    offset: int  # from the slice's start
    nbytes: int
    seq: bool  # cut along dim 1 by cp


def _round(n: int, align: int) -> int:
    return n + (-n % align)


def _keys(batch: Mapping[str, torch.Tensor], layout: Layout,
          dtype_of: Callable[[torch.Tensor], DType]) -> tuple[list[_Key], int]:
    """The per-slice placement of every tensor and the bytes a slice holds."""
    rows = next(iter(batch.values())).shape[0] // layout.dp
    keys, pos = [], 0
    for name, t in batch.items():
        dt = dtype_of(t)
        seq = name in layout.seq_keys and layout.cp > 1
        shape = (rows, *t.shape[1:])
        if seq:
            n = layout.seq_len_of(name, t.shape[1])
            pieces = len(cp_ranges(layout.cp, layout.cp_order)[0])  # each keeps the token after it (labels_from)
            shape = (rows, n // layout.cp + pieces * int(name == layout.labels_from), *t.shape[2:])
        nbytes = int(np.prod(shape, dtype=np.int64)) * t.element_size()
        flat = t.detach().cpu().contiguous().view(torch.uint8).numpy()
        source: np.ndarray
        if seq:
            source = flat.reshape(layout.dp, rows, t.shape[1], -1)
        else:
            source = flat.reshape(layout.dp, nbytes)
        pos = _round(pos, TENSOR_ALIGN)
        keys.append(_Key(name, source, dt, tuple(int(d) for d in shape), pos, nbytes, seq))
        pos += nbytes
    return keys, pos


def _fill(out: np.ndarray, keys: list[_Key], layout: Layout) -> None:
    """Copy every tensor into its place in every slice of ``out`` ([dp, cp, stride] bytes)."""
    ranges = cp_ranges(layout.cp, layout.cp_order) if layout.cp > 1 else None
    for k in keys:
        region = out[:, :, k.offset : k.offset + k.nbytes]
        if not k.seq:  # the same bytes in every cp slice
            region[...] = k.source.reshape(layout.dp, 1, k.nbytes)
            continue
        assert ranges is not None
        rows, width, inner = k.shape[0], k.shape[1], k.source.shape[3]
        target = region.reshape(layout.dp, layout.cp, rows, width, inner)
        n = layout.seq_len_of(k.name, k.source.shape[2])
        more = int(k.name == layout.labels_from)  # each chunk keeps the token after it
        for c, pieces in enumerate(ranges):
            at = 0
            for lo, hi in pieces:
                a, b = int(lo * n), int(hi * n) + more
                target[:, c, :, at : at + b - a] = k.source[:, :, a:b]
                at += b - a


def encode_grid(
    batch: Mapping[str, torch.Tensor],
    layout: Layout,
    *,
    base: int,
    key: str,
    metadata: Mapping[str, Any] | None,
    dtype_of: Callable[[torch.Tensor], DType],
) -> tuple[list[memoryview | bytes], int] | None:
    """The buffers of ``encode_tgb(layout.cut(batch), base=base, key=key)`` and its record width, or None.

    None when the batch has ragged keys (a list of tensors) or an empty
    tensor: the caller then cuts and encodes slice by slice. The last buffer
    is the footer and trailer. The payload is copied, so the batch may change
    once this returns.
    """
    if not batch or not all(isinstance(t, torch.Tensor) and t.numel() for t in batch.values()):
        return None  # ragged keys, or an empty tensor: slice by slice
    if base < 0 or base % V3_SLICE_ALIGN:
        raise ValueError(f"base={base} must be a non-negative multiple of {V3_SLICE_ALIGN}")
    layout.check_batch(batch)
    dp, cp = layout.dp, layout.cp
    keys, used = _keys(batch, layout, dtype_of)
    align = SLICE_ALIGN if used >= PAGE_ALIGN_FROM else V3_SLICE_ALIGN
    first = _round(base, align)
    stride = _round(used, align)
    n = dp * cp
    payload_end = _round(first + (n - 1) * stride + used, TENSOR_ALIGN)
    out = np.zeros(payload_end - first, dtype=np.uint8)
    grid = np.lib.stride_tricks.as_strided(out, shape=(dp, cp, used), strides=(cp * stride, stride, 1))
    _fill(grid, keys, layout)
    out.flags.writeable = False
    footer = _footer(out, keys, layout, first=first, stride=stride, used=used, footer_offset=payload_end, key=key,
                     metadata=metadata)
    buffers: list[memoryview | bytes] = [out.data, footer]
    if first > base:
        buffers.insert(0, bytes(first - base))  # up to the first page-aligned slice
    return buffers, record_width(len(keys), sum(len(k.shape) for k in keys))


def _footer(out: np.ndarray, keys: Sequence[_Key], layout: Layout, *, first: int, stride: int, used: int,
            footer_offset: int, key: str, metadata: Mapping[str, Any] | None) -> bytes:
    """The version-3 footer of the grid: its records built column by column, CRCs per tensor and record."""
    dp, cp, n, t = layout.dp, layout.cp, layout.dp * layout.cp, len(keys)
    ndims = sum(len(k.shape) for k in keys)
    records = np.zeros(n, dtype=record_dtype(t, ndims))
    idx = np.arange(n, dtype=np.int64)
    starts = first + idx * stride
    s = records["slice"]
    s["dp"], s["cp"], s["start"], s["first"], s["count"] = idx // cp, idx % cp, starts, idx * t, t
    last = keys[-1]
    s["end"] = starts + last.offset + last.nbytes
    rows = records["tensors"]
    value = google_crc32c.value
    dim_at = 0
    for j, k in enumerate(keys):
        r = rows[:, j]
        r["name"], r["dtype"], r["ndim"] = j, k.dt.code, len(k.shape)
        r["dims"] = idx * ndims + dim_at
        r["offset"], r["length"] = starts + k.offset, k.nbytes
        r["crc"] = [value(out[at : at + k.nbytes]) for at in range(k.offset, n * stride, stride)]
        records["dims"][:, dim_at : dim_at + len(k.shape)] = k.shape
        dim_at += len(k.shape)
    doc = {"names": [k.name for k in keys], "layout": None, "schema": {k.name: {"dtype": k.dt.name} for k in keys},
           "metadata": dict(metadata or {})}
    meta = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    meta_crc = crc32c_of(meta)
    records["tail"]["meta_crc"] = meta_crc
    raw = records.view(np.uint8).reshape(n, -1)
    raw.flags.writeable = False
    body_len = raw.shape[1] - 8
    head = key.encode()
    records["tail"]["crc"] = [
        google_crc32c.extend(value(raw[i, :body_len]), head + _PLACE.pack(footer_offset, i, meta_crc)) for i in range(n)
    ]
    header = _HEADER.pack(FOOTER_MAGIC, FORMAT_VERSION, 0, dp, cp, n, n * t, n * ndims, len(meta))
    body = b"".join([header, records.tobytes(), meta, bytes(-len(meta) % 8)])
    return body + _TRAILER.pack(len(body), crc32c_of(body), FORMAT_VERSION, TRAILER_MAGIC)
