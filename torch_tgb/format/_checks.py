"""Checks of a footer's tables against the object they describe (untrusted input).

Every offset, length, count and dimension is bounded before anything is built
from it, by the vectorised numpy checks. A small footer (the common case) is
first judged by one plain-Python pass that only says valid or not: on a
one-slice footer numpy's per-call cost makes the vectorised checks about 6x
slower (measured: 23 vs 147 us per parse), and that is paid per object. Errors
are always worded by the vectorised checks (messages from ``_MSG`` through
``_raise``), and ``tests/format/test_checks_paths.py`` holds the two rule sets
to the same verdict on every single-field corruption.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from torch_tgb.errors import CorruptObject
from torch_tgb.format._spec import _KNOWN_CODE_SET, _KNOWN_CODES, MAX_DIM, MAX_NDIM, SLICE_ALIGN

__all__ = ["SMALL_TABLE", "check_tables", "json_depth"]


def json_depth(value: object, limit: int) -> int:
    """Nesting depth of parsed JSON, iteratively (stops counting past ``limit``)."""
    stack: list[tuple[object, int]] = [(value, 1)]
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


#: every verdict, shared by both paths
_MSG = {
    "order": "slices out of (dp, cp) order",
    "align": "slice start not aligned to {align}",
    "range": "slice range outside the data region [0, {data_end})",
    "overlap": "slice overlaps the previous one",
    "table": "bad tensor table range",
    "beyond": "tensor offset/length beyond the object",
    "outside": "tensor bytes outside its slice",
    "name": "tensor name id out of range",
    "dtype": "unknown dtype code",
    "shape": "bad shape entry",
    "dim": f"absurd tensor dimension in footer (negative or > {MAX_DIM})",
}


def _raise(
    where: str, names: list[str], index: int, sdp: int, scp: int, check: str, data_end: int, name_id: int | None = None,
    align: int = SLICE_ALIGN,
) -> NoReturn:
    """The one way a table check fails: names slice ``index`` (dp, cp), and the tensor for a tensor row."""
    what = _MSG[check].format(data_end=data_end, align=align)
    if name_id is None:
        raise CorruptObject(f"{where}, slice #{index} (dp={sdp}, cp={scp}): {what}")
    tensor = repr(names[name_id]) if 0 <= name_id < len(names) else f"#{name_id}"
    raise CorruptObject(f"{where}, slice (dp={sdp}, cp={scp}), tensor {tensor}: {what}")


def _fail_at(
    where: str,
    names: list[str],
    data_end: int,
    bad: np.ndarray,
    srows: np.ndarray,
    check: str,
    owner: np.ndarray | None = None,
    trows: np.ndarray | None = None,
    align: int = SLICE_ALIGN,
    first_index: int = 0,
) -> NoReturn:
    """Raise for the first ``bad`` row (a slice row, or a tensor row when ``owner`` is given)."""
    i = int(np.flatnonzero(bad)[0])
    if owner is None or trows is None:
        _raise(where, names, first_index + i, int(srows[i]["dp"]), int(srows[i]["cp"]), check, data_end, align=align)
    si = int(owner[i])
    _raise(where, names, first_index + si, int(srows[si]["dp"]), int(srows[si]["cp"]), check, data_end,
           int(trows[i]["name"]), align=align)


#: footers with at most this many tensors are checked in plain Python (cheaper than numpy's per-call cost)
SMALL_TABLE = 256


def check_tables(
    where: str,
    srows: np.ndarray,
    trows: np.ndarray,
    dims: np.ndarray,
    names: list[str],
    cp: int,
    data_end: int,
    *,
    align: int = SLICE_ALIGN,
    first_index: int = 0,
) -> None:
    """Nothing may point outside the data region.

    A small table is judged by the fast Python pass; only a table that fails it
    (or a large one) goes through the vectorised checks, which alone word the
    error, so every message comes from one place. ``align``: what slice starts
    must be multiples of (version 3: 64); ``first_index``: the (dp, cp) index
    of the first slice row (a reader holding some slices' records only).
    """
    if len(trows) <= SMALL_TABLE and _tables_valid_small(
        srows.tolist(), trows.tolist(), dims.tolist(), names, cp, data_end, align, first_index
    ):
        return
    _check_tables_vectorised(where, srows, trows, dims, names, cp, data_end, align, first_index)
    if len(trows) <= SMALL_TABLE:  # the two rule sets disagree: still refuse, and say so
        raise CorruptObject(f"{where}: footer tables are inconsistent")


def _tables_valid_small(
    slices: list[tuple[int, ...]], tensors: list[tuple[int, ...]], dims: list[int], names: list[str],
    cp: int, data_end: int, align: int = SLICE_ALIGN, first_index: int = 0,
) -> bool:
    """The rules of ``_check_tables_vectorised`` as one row-major pass over Python lists: valid or not.

    Slice rows are ``(dp, cp, start, end, first, count)``; tensor rows
    ``(name_id, code, ndim, pad, dims_at, crc, offset, length)``.
    """
    num_names, num_dims, num_tensors = len(names), len(dims), len(tensors)
    expect_first, prev_end = 0, 0
    for i, (sdp, scp, start, end, first, count) in enumerate(slices, start=first_index):
        if sdp != i // cp or scp != i % cp or start % align or not start <= end <= data_end:
            return False
        if start < prev_end or first != expect_first or first + count > num_tensors:
            return False
        prev_end, expect_first = end, first + count
        for name_id, code, ndim, _pad, dims_at, _crc, offset, length in tensors[first : first + count]:
            if offset > data_end or length > data_end or offset < start or offset + length > end:
                return False
            if name_id >= num_names or code not in _KNOWN_CODE_SET or ndim > MAX_NDIM or dims_at + ndim > num_dims:
                return False
    if expect_first != num_tensors:  # the slices must own every tensor row: none unowned
        return False
    return not dims or (min(dims) >= 0 and max(dims) <= MAX_DIM)


def _check_tables_vectorised(
    where: str,
    srows: np.ndarray,
    trows: np.ndarray,
    dims: np.ndarray,
    names: list[str],
    cp: int,
    data_end: int,
    align: int = SLICE_ALIGN,
    first_index: int = 0,
) -> None:
    """Vectorised bounds checks: nothing may point outside the data region."""
    n = len(srows)
    idx = np.arange(first_index, first_index + n, dtype=np.int64)
    start = srows["start"].astype(np.uint64)
    end = srows["end"].astype(np.uint64)
    checks: list[tuple[np.ndarray, str]] = [
        ((srows["dp"] != idx // cp) | (srows["cp"] != idx % cp), "order"),
        (start % align != 0, "align"),
        ((end < start) | (end > data_end), "range"),
    ]
    if n > 1:
        overlap = np.zeros(n, dtype=bool)
        overlap[1:] = start[1:] < end[:-1]
        checks.append((overlap, "overlap"))
    first = srows["first"].astype(np.int64)
    count = srows["count"].astype(np.int64)
    expect_first = np.concatenate([[0], np.cumsum(count)[:-1]]) if n else first
    bad_range = (first != expect_first) | (first + count > len(trows))
    bad_range[-1] |= first[-1] + count[-1] != len(trows)  # the slices must own every tensor row: none unowned
    checks.append((bad_range, "table"))
    for bad, check in checks:
        if bad.any():
            _fail_at(where, names, data_end, bad, srows, check, align=align, first_index=first_index)
    if not len(trows):
        return
    owner = np.repeat(np.arange(n), count)
    t_off = trows["offset"].astype(np.uint64)
    t_len = trows["length"].astype(np.uint64)
    t_end = t_off + t_len  # both < 2**64 / 2 after the first check, no wrap
    tchecks: list[tuple[np.ndarray, str]] = [
        ((t_off > data_end) | (t_len > data_end), "beyond"),
    ]
    for bad, check in tchecks:
        if bad.any():
            _fail_at(where, names, data_end, bad, srows, check, owner, trows, align, first_index)
    ndim = trows["ndim"].astype(np.int64)
    dims_at = trows["dims"].astype(np.int64)
    tchecks = [
        ((t_off < start[owner]) | (t_end > end[owner]), "outside"),
        (trows["name"] >= len(names), "name"),
        (~_KNOWN_CODES[trows["dtype"]], "dtype"),
        ((ndim > MAX_NDIM) | (dims_at + ndim > len(dims)), "shape"),
    ]
    for bad, check in tchecks:
        if bad.any():
            _fail_at(where, names, data_end, bad, srows, check, owner, trows, align, first_index)
    if len(dims) and ((dims < 0).any() or (dims > MAX_DIM).any()):
        raise CorruptObject(f"{where}: {_MSG['dim']}")
