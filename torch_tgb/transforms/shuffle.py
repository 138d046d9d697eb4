"""Deterministic orders: a full permutation and ZeroBatch's block shuffle.

Pure functions of (size, seed, epoch): every process computes the same order
without talking to anyone (permutation-then-partition, seed 001). The
generator is seeded with the pair ``(seed, epoch)`` through numpy's
``SeedSequence`` rather than ``seed XOR epoch`` (seed 002), which would give
seed 1/epoch 0 the same order as seed 0/epoch 1.
"""

from __future__ import annotations

import numpy as np

__all__ = ["block_shuffle_order", "permutation"]


def _rng(seed: int, epoch: int) -> np.random.Generator:
    if seed < 0 or epoch < 0:
        raise ValueError(f"seed and epoch must be >= 0, got {seed=}, {epoch=}")
    return np.random.default_rng([seed, epoch])


def permutation(num_items: int, seed: int, epoch: int = 0) -> np.ndarray:
    """A permutation of ``range(num_items)`` determined by ``(seed, epoch)``."""
    if num_items < 0:
        raise ValueError(f"num_items must be >= 0, got {num_items}")
    return _rng(seed, epoch).permutation(num_items)


def block_shuffle_order(num_items: int, block_size: int, seed: int, epoch: int = 0) -> np.ndarray:
    """Items in blocks of ``block_size`` consecutive indices, blocks in shuffled order.

    Inside a block the order stays sequential (mmap / read-ahead locality);
    the block order changes with ``epoch``. The last block may be shorter.
    Returns an int64 array that is a permutation of ``range(num_items)``.
    """
    if num_items < 0 or block_size < 1:
        raise ValueError(f"need num_items >= 0 and block_size >= 1, got {num_items=}, {block_size=}")
    num_blocks = -(-num_items // block_size)
    blocks = _rng(seed, epoch).permutation(num_blocks)
    starts = blocks * block_size
    lengths = np.minimum(block_size, num_items - starts)
    # index i of the output: starts[block of i] + (i - first output index of that block)
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    order: np.ndarray = np.repeat(starts, lengths) + (np.arange(num_items, dtype=np.int64) - first)
    return order
