"""The delta filter of a codec: each item of a tensor differenced along every axis of a block shape, in place.

Pixels next to each other (left, above, in the next channel plane) are close
in value; zstd on their differences stores about half the bytes of zstd on
the pixels (``docs/multimodal.md``, *Compression at rest*). A tensor
``[n, *trailing]`` whose items hold ``prod(block)`` values each is viewed as
``[n, *block]`` (a patch ``C·p·p`` of ``Patchify``: ``block = (C, p, p)``;
a video patch ``(C, t, p, p)``) and differenced along each block axis in turn,
the first element of an axis kept as it is::

    encode:  x[..., j, ...] -= x[..., j - 1, ...]   for j = size-1 .. 1, per axis
    decode:  x[..., j, ...] += x[..., j - 1, ...]   for j = 1 .. size-1, per axis (a prefix sum)

Integer arithmetic wraps (modulo ``2**bits``), so decode is the exact inverse
of encode for every integer dtype; floats are refused. Each step is one numpy
add over all items at once (``sum(block) - ndim`` of them), or along an axis
of short runs one torch ``cumsum_`` (:func:`delta_decode`); both release the
GIL: decoding runs on a reader thread beside the training loop. Pure.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["LONG_RUN", "delta_decode", "delta_encode", "delta_problem"]

#: runs of at least this many bytes are summed by numpy adds; shorter ones by torch's cumsum_ where it may
LONG_RUN = 64


def delta_problem(block: tuple[int, ...], dtype: np.dtype, trailing: tuple[int, ...]) -> str | None:
    """What keeps ``dtype`` items of shape ``trailing`` from the delta filter over ``block``; None: nothing."""
    if not block or any(b < 1 for b in block):
        return f"delta block {list(block)} must be one or more positive sizes"
    if dtype.kind not in "iu":
        return f"the delta filter needs an integer dtype, not {dtype} (a float's differences do not round-trip)"
    if math.prod(trailing) != math.prod(block):
        return (f"items of shape {list(trailing)} hold {math.prod(trailing)} values; the delta block "
                f"{list(block)} holds {math.prod(block)}")
    return None


def _axes(array: np.ndarray, block: tuple[int, ...]) -> tuple[np.ndarray, list[int]]:
    """``array`` viewed as ``[n, *block]`` (no copy) and the axes to difference (those longer than 1)."""
    items = array.shape[0] if array.ndim else 0
    view = array.reshape(items, *block)
    return view, [axis + 1 for axis, size in enumerate(block) if size > 1]


def delta_encode(array: np.ndarray, block: tuple[int, ...]) -> None:
    """Difference ``array`` (an integer ``[n, ...]``, contiguous, writable) in place along every axis of ``block``."""
    view, axes = _axes(array, block)
    for axis in axes:
        size = view.shape[axis]
        for j in range(size - 1, 0, -1):  # backwards: each row still holds its original neighbour
            now, before = _rows(view, axis, j)
            np.subtract(now, before, out=now)


def delta_decode(array: np.ndarray, block: tuple[int, ...], *, short_runs: str | None = None) -> None:
    """Undo :func:`delta_encode` in place: a prefix sum along every axis of ``block``.

    The sums along different axes commute, so each axis takes its fastest way. Along an axis whose runs are
    long (:data:`LONG_RUN` bytes or more: the colour planes of a patch), one numpy add per index. Along one of
    short runs (a patch's rows and columns, 14 bytes: a numpy add over them is mostly loop overhead), for
    1-byte items, torch's in-place ``cumsum_`` over a uint8 view of the same memory, 1.4-1.6x faster on a
    step of patches (``benchmarks/decode_path.py``), but only where torch runs one intra-op thread
    (``torch.get_num_threads() == 1``, torchrun's default): elsewhere ATen would spread each call over the
    process's threads, beside the trainer's; numpy adds there. ``short_runs``: ``"torch"`` or ``"numpy"``
    to choose (tests, benchmarks; None: as just said). Both wrap modulo 2**bits, release the GIL, copy nothing.
    """
    view, axes = _axes(array, block)
    use_torch = (torch.get_num_threads() == 1) if short_runs is None else short_runs == "torch"
    tensor = None
    for axis in reversed(axes):
        if use_torch and view.itemsize == 1 and math.prod(view.shape[axis + 1 :]) < LONG_RUN:
            if tensor is None:  # uint8 whatever the 1-byte dtype: two's complement sums wrap alike, and defined
                tensor = torch.from_numpy(view.view(np.uint8))
            tensor.cumsum_(axis)
            continue
        for j in range(1, view.shape[axis]):
            now, before = _rows(view, axis, j)
            np.add(now, before, out=now)


def _rows(view: np.ndarray, axis: int, j: int) -> tuple[np.ndarray, np.ndarray]:
    """Index ``j`` and ``j - 1`` of ``view`` along ``axis`` (views)."""
    at: list[slice | int] = [slice(None)] * view.ndim
    at[axis] = j
    now = view[tuple(at)]
    at[axis] = j - 1
    return now, view[tuple(at)]
