"""``frame_size``: where a zstd frame ends in its stored bytes, walked from its block headers, never decoded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.format._zstd_frame import frame_size

zstd = pytest.importorskip("zstandard")


def _frame(payload: bytes, level: int, checksum: bool = True) -> bytes:
    return zstd.ZstdCompressor(level=level, write_content_size=True, write_checksum=checksum).compress(payload)


def _payload(kind: str, size: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    if kind == "random":  # raw blocks
        return rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    if kind == "runs":  # RLE blocks
        return bytes(size)
    return (np.arange(size) // 7 % 13).astype(np.uint8).tobytes()  # compressed blocks


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["random", "runs", "smooth"]), size=st.integers(0, 300_000), seed=st.integers(0, 99),
       level=st.sampled_from([1, 3]), checksum=st.booleans(), extra=st.binary(max_size=9))
def test_the_walk_ends_where_the_frame_ends_whatever_follows(kind, size, seed, level, checksum, extra) -> None:
    frame = _frame(_payload(kind, size, seed), level, checksum)
    data = memoryview(frame + extra)
    assert frame_size(data, zstd.frame_header_size(data)) == len(frame)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["random", "runs", "smooth"]), size=st.integers(1, 300_000), cut=st.integers(1, 64))
def test_a_frame_cut_short_is_a_problem_never_a_size(kind, size, cut) -> None:
    frame = _frame(_payload(kind, size, 0), 1)
    header = zstd.frame_header_size(frame)
    cut = min(cut, len(frame) - header)
    got = frame_size(memoryview(frame[: len(frame) - cut]), header)
    assert isinstance(got, str) and "run past" in got


def test_a_reserved_block_type_and_an_impossible_header_are_problems() -> None:
    frame = bytearray(_frame(b"abc" * 1000, 1))
    header = zstd.frame_header_size(frame)
    frame[header] |= 0b110  # block type 3
    assert "reserved type 3" in str(frame_size(memoryview(frame), header))
    assert "does not fit" in str(frame_size(memoryview(frame[:3]), 9))
