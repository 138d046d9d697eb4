"""Checks of a footer's tables against the object they describe (untrusted input).

Every offset, length, count and dimension is bounded before anything is built
from it. Small footers are checked in plain Python (numpy's per-call cost
dominates there), large ones with vectorised numpy; both raise the same
:class:`CorruptObject` messages naming object, slice and tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torch_tgb.errors import CorruptObject
from torch_tgb.format._spec import _KNOWN_CODE_SET, _KNOWN_CODES, MAX_DIM, MAX_NDIM, SLICE_ALIGN

__all__ = ["SMALL_TABLE", "check_tables", "json_depth"]


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of parsed JSON, iteratively (stops counting past ``limit``)."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def _fail_at(
    where: str,
    bad: np.ndarray,
    srows: np.ndarray,
    what: str,
    owner: np.ndarray | None = None,
    trows: np.ndarray | None = None,
    names: list[str] | None = None,
) -> None:
    """Raise for the first ``bad`` row, naming its slice (and tensor when it is a tensor row)."""
    i = int(np.flatnonzero(bad)[0])
    if owner is None or trows is None or names is None:
        raise CorruptObject(f"{where}, slice #{i} (dp={int(srows[i]['dp'])}, cp={int(srows[i]['cp'])}): {what}")
    si = int(owner[i])
    name_id = int(trows[i]["name"])
    tensor = repr(names[name_id]) if name_id < len(names) else f"#{i}"
    raise CorruptObject(
        f"{where}, slice (dp={int(srows[si]['dp'])}, cp={int(srows[si]['cp'])}), tensor {tensor}: {what}"
    )


#: footers with at most this many tensors are checked in plain Python (cheaper than numpy's per-call cost)
SMALL_TABLE = 256


def check_tables(
    where: str,
    srows: np.ndarray,
    trows: np.ndarray,
    dims: np.ndarray,
    names: list[str],
    dp: int,
    cp: int,
    data_end: int,
) -> None:
    """Nothing may point outside the data region; the same checks either way."""
    if len(trows) <= SMALL_TABLE:
        _check_tables_small(where, srows.tolist(), trows.tolist(), dims.tolist(), names, cp, data_end)
    else:
        _check_tables_vectorised(where, srows, trows, dims, names, dp, cp, data_end)


def _check_tables_small(
    where: str, slices: list[tuple[int, ...]], tensors: list[tuple[int, ...]], dims: list[int], names: list[str],
    cp: int, data_end: int,
) -> None:
    def fail(i: int, what: str, name_id: int | None = None) -> None:
        sdp, scp = slices[i][0], slices[i][1]
        if name_id is None:
            raise CorruptObject(f"{where}, slice #{i} (dp={sdp}, cp={scp}): {what}")
        tensor = repr(names[name_id]) if name_id < len(names) else f"#{name_id}"
        raise CorruptObject(f"{where}, slice (dp={sdp}, cp={scp}), tensor {tensor}: {what}")

    num_names, num_dims, num_tensors = len(names), len(dims), len(tensors)
    next_first, prev_end = 0, 0
    for i, (sdp, scp, start, end, first, count) in enumerate(slices):
        if sdp != i // cp or scp != i % cp:
            fail(i, "slices out of (dp, cp) order")
        if start % SLICE_ALIGN:
            fail(i, f"slice start not aligned to {SLICE_ALIGN}")
        if not start <= end <= data_end:
            fail(i, f"slice range outside the data region [0, {data_end})")
        if start < prev_end:
            fail(i, "slice overlaps the previous one")
        if first != next_first or first + count > num_tensors:
            fail(i, "bad tensor table range")
        prev_end, next_first = end, first + count
        for name_id, code, ndim, _pad, dims_at, _crc, offset, length in tensors[first : first + count]:
            if offset > data_end or length > data_end:
                fail(i, "tensor offset/length beyond the object", name_id)
            if offset < start or offset + length > end:
                fail(i, "tensor bytes outside its slice", name_id)
            if name_id >= num_names:
                fail(i, "tensor name id out of range", name_id)
            if code not in _KNOWN_CODE_SET:
                fail(i, "unknown dtype code", name_id)
            if ndim > MAX_NDIM or dims_at + ndim > num_dims:
                fail(i, "bad shape entry", name_id)
    if dims and (min(dims) < 0 or max(dims) > MAX_DIM):
        raise CorruptObject(f"{where}: absurd tensor dimension in footer (negative or > {MAX_DIM})")


def _check_tables_vectorised(
    where: str,
    srows: np.ndarray,
    trows: np.ndarray,
    dims: np.ndarray,
    names: list[str],
    dp: int,
    cp: int,
    data_end: int,
) -> None:
    """Vectorised bounds checks: nothing may point outside the data region."""
    n = len(srows)
    idx = np.arange(n, dtype=np.int64)
    start = srows["start"].astype(np.uint64)
    end = srows["end"].astype(np.uint64)
    checks: list[tuple[np.ndarray, str]] = [
        ((srows["dp"] != idx // cp) | (srows["cp"] != idx % cp), "slices out of (dp, cp) order"),
        (start % SLICE_ALIGN != 0, f"slice start not aligned to {SLICE_ALIGN}"),
        ((end < start) | (end > data_end), f"slice range outside the data region [0, {data_end})"),
    ]
    if n > 1:
        overlap = np.zeros(n, dtype=bool)
        overlap[1:] = start[1:] < end[:-1]
        checks.append((overlap, "slice overlaps the previous one"))
    first = srows["first"].astype(np.int64)
    count = srows["count"].astype(np.int64)
    expect_first = np.concatenate([[0], np.cumsum(count)[:-1]]) if n else first
    checks.append(((first != expect_first) | (first + count > len(trows)), "bad tensor table range"))
    for bad, what in checks:
        if bad.any():
            _fail_at(where, bad, srows, what)
    if not len(trows):
        return
    owner = np.repeat(np.arange(n), count)
    t_off = trows["offset"].astype(np.uint64)
    t_len = trows["length"].astype(np.uint64)
    t_end = t_off + t_len  # both < 2**64 / 2 after the first check, no wrap
    tchecks: list[tuple[np.ndarray, str]] = [
        ((t_off > data_end) | (t_len > data_end), "tensor offset/length beyond the object"),
    ]
    for bad, what in tchecks:
        if bad.any():
            _fail_at(where, bad, srows, what, owner, trows, names)
    ndim = trows["ndim"].astype(np.int64)
    dims_at = trows["dims"].astype(np.int64)
    tchecks = [
        ((t_off < start[owner]) | (t_end > end[owner]), "tensor bytes outside its slice"),
        (trows["name"] >= len(names), "tensor name id out of range"),
        (~_KNOWN_CODES[trows["dtype"]], "unknown dtype code"),
        ((ndim > MAX_NDIM) | (dims_at + ndim > len(dims)), "bad shape entry"),
    ]
    for bad, what in tchecks:
        if bad.any():
            _fail_at(where, bad, srows, what, owner, trows, names)
    if len(dims) and ((dims < 0).any() or (dims > MAX_DIM).any()):
        raise CorruptObject(f"{where}: absurd tensor dimension in footer (negative or > {MAX_DIM})")
