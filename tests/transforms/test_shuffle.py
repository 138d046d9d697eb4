"""Deterministic orders: permutations of range(n), different per epoch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms import block_shuffle_order, permutation


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 500), block=st.integers(1, 64), seed=st.integers(0, 2**32), epoch=st.integers(0, 50))
def test_block_shuffle_is_a_deterministic_permutation(n, block, seed, epoch):
    order = block_shuffle_order(n, block, seed, epoch)
    assert order.dtype == np.int64 and sorted(order.tolist()) == list(range(n))
    assert np.array_equal(order, block_shuffle_order(n, block, seed, epoch))
    # sequential inside each block, blocks start at multiples of block
    for start in range(0, n, block):
        i = int(np.flatnonzero(order == start)[0])
        run = order[i : i + min(block, n - start)]
        assert np.array_equal(run, np.arange(start, start + len(run)))


def test_block_shuffle_differs_per_epoch_and_seed():
    a, b = block_shuffle_order(10_000, 16, 7, 0), block_shuffle_order(10_000, 16, 7, 1)
    assert not np.array_equal(a, b)
    # (seed, epoch) pairs do not collide the way seed XOR epoch would
    assert not np.array_equal(block_shuffle_order(10_000, 16, 1, 0), block_shuffle_order(10_000, 16, 0, 1))
    assert np.array_equal(block_shuffle_order(10, 100, 3, 0), np.arange(10))  # one block


def test_permutation():
    p = permutation(1000, seed=5, epoch=2)
    assert sorted(p.tolist()) == list(range(1000))
    assert np.array_equal(p, permutation(1000, seed=5, epoch=2))
    assert not np.array_equal(p, permutation(1000, seed=5, epoch=3))
    with pytest.raises(ValueError):
        block_shuffle_order(10, 0, 0, 0)
    with pytest.raises(ValueError):
        permutation(10, seed=-1)
