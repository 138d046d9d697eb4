"""Permutation-then-partition of a source's units over shards, and window shuffles.

A source (token file, tar shards, Lance fragments, Parquet row groups) is cut
into ``num_units`` units. Every shard computes the same permutation of all
units from ``(seed, epoch)`` and takes its contiguous slice of it (seed 001
§5): a new epoch reorders everything without touching the data, and a change
of ``shard_count`` only repartitions the same permuted list, so the shards of
any count together cover every unit exactly once. Hash-mod assignment would
move every unit when the count changes.

Inside a unit, records may be shuffled in windows of consecutive records
(``window_permutation``): unlike a sliding reservoir buffer, a window is
re-read and re-permuted identically after a restart, so a reader's position is
three integers and no record is ever kept in checkpoint state.
"""

from __future__ import annotations

import numpy as np

from torch_tgb.transforms.shuffle import permutation

__all__ = ["partition_bounds", "shard_assignment", "window_permutation"]


def partition_bounds(num_items: int, parts: int) -> np.ndarray:
    """``parts + 1`` boundaries cutting ``range(num_items)`` into contiguous parts.

    Part ``i`` is ``[bounds[i], bounds[i + 1])``; sizes differ by at most one,
    the first ``num_items % parts`` parts holding the extra item.
    """
    if num_items < 0 or parts < 1:
        raise ValueError(f"need num_items >= 0 and parts >= 1, got {num_items=}, {parts=}")
    base, extra = divmod(num_items, parts)
    sizes = np.full(parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(sizes)])


def shard_assignment(num_units: int, *, shard_index: int, shard_count: int, seed: int, epoch: int) -> np.ndarray:
    """The units read by shard ``shard_index`` of ``shard_count`` in ``epoch``, in reading order.

    A contiguous slice of ``permutation(num_units, seed, epoch)``; the slices of
    all shards are disjoint and together are the whole permutation.
    """
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"need 0 <= shard_index < shard_count, got {shard_index=}, {shard_count=}")
    order = permutation(num_units, seed, epoch)
    bounds = partition_bounds(num_units, shard_count)
    # one shard takes it all, without a second copy of the whole order; a slice is copied so the rest is freed
    return order[bounds[shard_index] : bounds[shard_index + 1]].astype(np.int64, copy=shard_count > 1)


def window_permutation(size: int, *, seed: int, epoch: int, unit: int, window: int) -> np.ndarray:
    """The order in which the ``size`` records of one shuffle window are emitted.

    Seeded by ``(seed, epoch, unit, window)`` where ``unit`` is the unit's
    index in the whole source (not its position in a shard) and ``window`` the
    index of the window's first record in the unit: a unit is shuffled the same
    way whatever the shard count.
    """
    if min(size, seed, epoch, unit, window) < 0:
        raise ValueError(f"arguments must be >= 0, got {size=}, {seed=}, {epoch=}, {unit=}, {window=}")
    return np.random.default_rng([seed, epoch, unit, window]).permutation(size)
