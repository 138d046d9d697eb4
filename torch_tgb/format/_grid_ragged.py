"""Encoding a batch with ragged keys as one TGB without a Python object per slice and tensor.

:func:`~torch_tgb.format._grid.encode_grid` writes a dense batch with one
strided copy per tensor; a batch with ragged keys (``seq_lens`` of packed
rows, ``provenance``) took the general path, ``encode_tgb(layout.cut(batch))``:
a ``RaggedRows`` slice, a torch view, a detach and a dtype lookup per (slice,
tensor), some 13 us each. A ragged key adds two tensors to every dp slice, so
that per-tensor cost, not the bytes, was most of what provenance cost on
ingest (``docs/provenance.md``, *Cost*). Here every tensor is turned into
numpy bytes once per batch; a slice's part of it is a numpy slice (the
ragged values cut at the offsets of every ``rows``-th row, the offsets of all
slices rebased in one operation), every place is computed with numpy (sizes,
alignment, running sums), the footer's tables are filled column by column,
and what is left per (slice, tensor) is its CRC32C and one copy into the
payload. The bytes are exactly
those of ``encode_tgb(layout.cut(batch), ...)`` (``tests/format/test_grid.py``
holds them equal); with ``cp > 1`` the general path is taken.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import google_crc32c
import numpy as np
import torch

from torch_tgb.format._dtypes import DType, dtype_of_tensor
from torch_tgb.format._footer import _encode_v3
from torch_tgb.format._grid import _round
from torch_tgb.format._records import record_width
from torch_tgb.format._spec import (
    _SLICE_ROW,
    _TENSOR_ROW,
    FORMAT_VERSION,
    PAGE_ALIGN_FROM,
    SLICE_ALIGN,
    TENSOR_ALIGN,
    V3_SLICE_ALIGN,
)
from torch_tgb.layout import Layout, offsets_key, ragged_part

__all__ = ["encode_ragged_grid"]


def _int64() -> DType:
    found = dtype_of_tensor(torch.int64)
    assert found is not None
    return found


#: the dtype of a ragged key's offsets
_INT64 = _int64()


@dataclass(frozen=True)
class _Column:
    """One tensor of every slice: its name and dtype, each slice's bytes, their sizes and each slice's shape."""

    name: str
    dt: DType
    parts: list[np.ndarray]  # uint8, one per slice
    nbytes: np.ndarray  # int64 [dp]
    dims: np.ndarray  # int64 [dp, ndim]


def _bytes(t: torch.Tensor, rows: int) -> np.ndarray:
    """The bytes of ``t`` as uint8 ``[rows, bytes per row]`` (a view where ``t`` is a contiguous CPU tensor)."""
    flat = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return flat.reshape(rows, flat.size // rows) if rows else flat.reshape(0, 0)


def _dims(first: np.ndarray, inner: tuple[int, ...]) -> np.ndarray:
    """Shapes ``(first[d], *inner)`` of every slice as int64 ``[dp, 1 + len(inner)]``."""
    out = np.empty((len(first), 1 + len(inner)), dtype=np.int64)
    out[:, 0] = first
    out[:, 1:] = inner
    return out


def _columns(batch: Mapping[str, Any], dp: int, rows: int,
             dtype_of: Callable[[torch.Tensor], DType]) -> tuple[list[_Column], list[str]]:
    """Every tensor of the slices, in the order ``Layout.cut`` gives them, and the ragged keys."""
    columns: list[_Column] = []
    ragged: list[str] = []
    for name, t in batch.items():
        if isinstance(t, torch.Tensor):
            flat = _bytes(t, dp)
            columns.append(_Column(name, dtype_of(t), list(flat), np.full(dp, flat.shape[1], dtype=np.int64),
                                   _dims(np.full(dp, rows), tuple(t.shape[1:]))))
            continue
        values, offsets = ragged_part(t)
        ragged.append(name)
        at = np.ascontiguousarray(offsets.numpy(), dtype=np.int64)
        cuts = at[::rows]  # where each dp slice's rows start and end in the values
        items = _bytes(values, len(values))
        bounds = cuts.tolist()
        parts = [items[bounds[d] : bounds[d + 1]].reshape(-1) for d in range(dp)]
        columns.append(_Column(name, dtype_of(values), parts,
                               np.diff(cuts) * items.shape[1], _dims(np.diff(cuts), tuple(values.shape[1:]))))
        window = np.lib.stride_tricks.as_strided(at, shape=(dp, rows + 1), strides=(rows * at.itemsize, at.itemsize))
        rebased = (window - cuts[:dp, None]).astype("<i8", copy=False).view(np.uint8)  # [dp, (rows + 1) * 8]
        columns.append(_Column(offsets_key(name), _INT64, list(rebased), np.full(dp, rebased.shape[1], dtype=np.int64),
                               _dims(np.full(dp, rows + 1), ())))
    return columns, ragged


def encode_ragged_grid(
    batch: Mapping[str, Any],
    layout: Layout,
    *,
    base: int,
    key: str,
    metadata: Mapping[str, Any] | None,
    dtype_of: Callable[[torch.Tensor], DType],
) -> tuple[list[memoryview | bytes], int] | None:
    """The buffers of ``encode_tgb(layout.cut(batch), base=base, key=key)`` and its record width, or None.

    None unless the batch has a ragged key and ``layout.cp == 1`` (the caller
    then cuts and encodes slice by slice). The payload is copied, so the batch
    may change once this returns; the last buffer is the footer and trailer.
    """
    if layout.cp != 1 or base < 0 or base % V3_SLICE_ALIGN or all(isinstance(t, torch.Tensor) for t in batch.values()):
        return None
    dp = layout.dp
    rows = layout.check_batch(batch) // dp
    columns, ragged = _columns(batch, dp, rows, dtype_of)
    nbytes = np.stack([c.nbytes for c in columns], axis=1)  # [dp, tensors]
    # every slice starts aligned (a multiple of TENSOR_ALIGN), so its tensors sit at the padded sizes' running sum
    inner = np.zeros_like(nbytes)
    np.cumsum(nbytes[:, :-1] + (-nbytes[:, :-1] % TENSOR_ALIGN), axis=1, out=inner[:, 1:])
    used = inner[:, -1] + nbytes[:, -1]
    align = SLICE_ALIGN if int(nbytes.sum(axis=1).max()) >= PAGE_ALIGN_FROM else V3_SLICE_ALIGN
    starts = np.full(dp, _round(base, align), dtype=np.int64)
    starts[1:] += np.cumsum(used[:-1] + (-used[:-1] % align))
    at = starts[:, None] + inner  # [dp, tensors]: absolute
    end = _round(int(starts[-1] + used[-1]), TENSOR_ALIGN)
    out = np.zeros(end - base, dtype=np.uint8)
    crcs = np.empty(nbytes.shape, dtype=np.uint32)
    value = google_crc32c.value
    places = (at - base).tolist()
    for k, c in enumerate(columns):
        for d, data in enumerate(c.parts):
            data.flags.writeable = False  # google_crc32c takes read-only arrays without a copy
            crcs[d, k] = value(data)
            out[places[d][k] : places[d][k] + data.nbytes] = data
    out.flags.writeable = False
    footer = _footer(columns, ragged, starts, starts + used, at, nbytes, crcs, metadata=metadata, footer_offset=end,
                     key=key)
    return [out.data, footer], record_width(len(columns), sum(c.dims.shape[1] for c in columns))


def _footer(columns: list[_Column], ragged: list[str], starts: np.ndarray, ends: np.ndarray, at: np.ndarray,
            nbytes: np.ndarray, crcs: np.ndarray, *, metadata: Mapping[str, Any] | None, footer_offset: int,
            key: str) -> bytes:
    """The version-3 footer ``encode_footer`` writes for these slices, its tables built column by column."""
    dp, t = nbytes.shape
    srows = np.zeros(dp, dtype=_SLICE_ROW)
    srows["dp"], srows["start"], srows["end"] = np.arange(dp), starts, ends
    srows["first"], srows["count"] = np.arange(dp) * t, t
    ndim = np.array([c.dims.shape[1] for c in columns], dtype=np.int64)
    width = int(ndim.sum())
    trows = np.zeros((dp, t), dtype=_TENSOR_ROW)
    trows["name"] = np.arange(t)
    trows["dtype"] = [c.dt.code for c in columns]
    trows["ndim"] = ndim
    trows["dims"] = np.arange(dp)[:, None] * width + (np.cumsum(ndim) - ndim)
    trows["crc"], trows["offset"], trows["length"] = crcs, at, nbytes
    dims = np.concatenate([c.dims for c in columns], axis=1)  # [dp, width]
    offsets = {offsets_key(k) for k in ragged}
    schema = {c.name: {"dtype": c.dt.name, **({"ragged": True} if c.name in ragged else {})}
              for c in columns if c.name not in offsets}
    doc = {"names": [c.name for c in columns], "layout": None, "schema": schema, "metadata": dict(metadata or {}),
           "ragged": sorted(ragged)}
    meta = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    return _encode_v3(dp, 1, srows, trows.reshape(-1), cast("list[int]", dims.reshape(-1)), meta, footer_offset, key,
                      FORMAT_VERSION)
