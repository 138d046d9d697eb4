"""Permutation-then-partition over shards, and window shuffles: pure, property-tested."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms.partition import partition_bounds, shard_assignment, window_permutation
from torch_tgb.transforms.shuffle import permutation

units = st.integers(0, 300)
counts = st.integers(1, 40)
seeds = st.integers(0, 2**32)
epochs = st.integers(0, 20)


def _all(n: int, count: int, seed: int, epoch: int) -> list[np.ndarray]:
    return [shard_assignment(n, shard_index=i, shard_count=count, seed=seed, epoch=epoch) for i in range(count)]


@settings(max_examples=150, deadline=None)
@given(n=units, count=counts, seed=seeds, epoch=epochs)
def test_shards_are_disjoint_complete_and_contiguous_in_permuted_order(n, count, seed, epoch):
    parts = _all(n, count, seed, epoch)
    joined = np.concatenate(parts)
    # contiguous slices of the permutation, in shard order: together exactly the permutation
    assert np.array_equal(joined, permutation(n, seed, epoch))
    assert sorted(joined.tolist()) == list(range(n))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert all(p.dtype == np.int64 for p in parts)


@settings(max_examples=100, deadline=None)
@given(n=units, a=counts, b=counts, seed=seeds, epoch=epochs)
def test_changing_the_count_repartitions_the_same_list(n, a, b, seed, epoch):
    assert np.array_equal(np.concatenate(_all(n, a, seed, epoch)), np.concatenate(_all(n, b, seed, epoch)))


@settings(max_examples=100, deadline=None)
@given(n=units, count=counts, seed=seeds, epoch=epochs)
def test_deterministic(n, count, seed, epoch):
    for x, y in zip(_all(n, count, seed, epoch), _all(n, count, seed, epoch)):
        assert np.array_equal(x, y)


def test_epoch_and_seed_change_the_order():
    base = shard_assignment(1000, shard_index=0, shard_count=4, seed=7, epoch=0)
    assert not np.array_equal(base, shard_assignment(1000, shard_index=0, shard_count=4, seed=7, epoch=1))
    assert not np.array_equal(base, shard_assignment(1000, shard_index=0, shard_count=4, seed=8, epoch=0))


@settings(max_examples=100, deadline=None)
@given(n=units, parts=counts)
def test_partition_bounds(n, parts):
    b = partition_bounds(n, parts)
    assert len(b) == parts + 1 and b[0] == 0 and b[-1] == n and bool((np.diff(b) >= 0).all())


@settings(max_examples=100, deadline=None)
@given(size=st.integers(0, 200), seed=seeds, epoch=epochs, unit=st.integers(0, 10**6), window=st.integers(0, 10**6))
def test_window_permutation(size, seed, epoch, unit, window):
    p = window_permutation(size, seed=seed, epoch=epoch, unit=unit, window=window)
    assert sorted(p.tolist()) == list(range(size))
    assert np.array_equal(p, window_permutation(size, seed=seed, epoch=epoch, unit=unit, window=window))


def test_window_permutation_depends_on_every_key():
    base = window_permutation(100, seed=1, epoch=2, unit=3, window=4)
    for change in ({"seed": 9}, {"epoch": 9}, {"unit": 9}, {"window": 9}):
        kw = {"seed": 1, "epoch": 2, "unit": 3, "window": 4} | change
        assert not np.array_equal(base, window_permutation(100, **kw))


def test_bad_arguments():
    with pytest.raises(ValueError):
        shard_assignment(10, shard_index=2, shard_count=2, seed=0, epoch=0)
    with pytest.raises(ValueError):
        partition_bounds(10, 0)
    with pytest.raises(ValueError):
        window_permutation(3, seed=-1, epoch=0, unit=0, window=0)


def test_an_assignment_holds_one_copy_of_the_order():
    """A token file's order has a unit per document (10^8 and more in a large corpus): one shard takes the
    permutation itself, with no second copy of the whole order at any moment; a shard of several owns its slice,
    so the whole permutation is freed once it is cut."""
    import tracemalloc

    n = 1_000_000
    tracemalloc.start()
    try:
        whole = shard_assignment(n, shard_index=0, shard_count=1, seed=3, epoch=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert whole.dtype == np.int64 and np.array_equal(whole, permutation(n, 3, 1))
    assert peak < 1.5 * n * 8, f"peak {peak} bytes for an order of {n * 8}"
    part = shard_assignment(1000, shard_index=1, shard_count=4, seed=3, epoch=1)
    assert part.dtype == np.int64 and part.base is None and np.array_equal(part, permutation(1000, 3, 1)[250:500])
