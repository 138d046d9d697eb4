"""The segment index: every footer of a segment once more at its end, read with one tail read.

Untrusted bytes: any single corrupted byte of the index is refused (the index
CRC covers rows and footers; the trailer's fields are bounded and checked), a
footer taken from an intact index is exactly the footer in place, and a
segment without an index is told apart by its last 24 bytes.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import CorruptObject
from torch_tgb.format import (
    INDEX_TRAILER_SIZE,
    SLICE_ALIGN,
    SegmentIndex,
    SliceData,
    encode_segment_index,
    encode_tgb,
    parse_footer,
    parse_index_trailer,
)


def segment(rows: list[int]) -> tuple[bytearray, list[tuple[int, int]]]:
    """TGBs of ``rows[i]`` rows each, packed as the producer packs a segment."""
    data = bytearray()
    tgbs = []
    for i, n in enumerate(rows):
        base = len(data) + (-len(data) % SLICE_ALIGN)
        slices = [SliceData(d, 0, {"ids": torch.arange(n * 4, dtype=torch.int32).reshape(n, 4) + 100 * i})
                  for d in range(2)]
        buffers, obj = encode_tgb(slices, base=base, metadata={"i": i})
        data += bytes(base - len(data))
        for b in buffers:
            data += b
        tgbs.append((obj.footer_offset, obj.size))
    return data, tgbs


def indexed(rows: list[int]) -> tuple[bytes, list[tuple[int, int]], int]:
    data, tgbs = segment(rows)
    index = encode_segment_index(data, tgbs)
    return bytes(data) + index, tgbs, len(data)


def load(obj: bytes) -> SegmentIndex:
    found = parse_index_trailer(obj[-INDEX_TRAILER_SIZE:], key="seg", object_size=len(obj))
    assert found is not None
    return SegmentIndex(obj[found[0] :], key="seg", object_size=len(obj))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=12))
def test_every_footer_from_the_index_is_the_footer_in_place(rows) -> None:
    obj, tgbs, index_at = indexed(rows)
    found = parse_index_trailer(obj[-INDEX_TRAILER_SIZE:], key="seg", object_size=len(obj))
    assert found == (index_at, len(rows))
    index = load(obj)
    assert len(index) == len(rows)
    for fo, size in tgbs:
        in_place = parse_footer(obj[fo:size], key="seg", size=size, footer_offset=fo)
        from_index = index.footer(fo, size)
        assert from_index is not None
        assert from_index.slices() == in_place.slices() and from_index.metadata == in_place.metadata
    # an entry the index does not hold (wrong offset or wrong size) is not answered from it
    fo, size = tgbs[0]
    assert index.footer(fo + 8, size) is None and index.footer(fo, size + 1) is None


def test_a_segment_without_an_index_ends_with_a_tgb_trailer() -> None:
    data, _ = segment([2, 3])
    assert parse_index_trailer(bytes(data[-INDEX_TRAILER_SIZE:]), key="seg", object_size=len(data)) is None


def test_every_single_byte_corruption_of_the_index_is_refused() -> None:
    obj, _, index_at = indexed([2, 3, 1])
    for at in range(index_at, len(obj)):
        for flip in (0x01, 0x80):
            bad = bytearray(obj)
            bad[at] ^= flip
            with pytest.raises(CorruptObject):
                found = parse_index_trailer(bytes(bad[-INDEX_TRAILER_SIZE:]), key="seg", object_size=len(bad))
                if found is None:
                    raise AssertionError(f"byte {at}: a corrupt index read as no index")
                SegmentIndex(bytes(bad[found[0] :]), key="seg", object_size=len(bad))


@pytest.mark.parametrize("cut", [1, 100, INDEX_TRAILER_SIZE + 1])
def test_a_truncated_tail_is_refused(cut: int) -> None:
    obj, _, index_at = indexed([2, 2])
    with pytest.raises(CorruptObject):
        SegmentIndex(obj[index_at + cut :], key="seg", object_size=len(obj))


def test_absurd_trailer_claims_are_refused_before_any_allocation() -> None:
    import struct

    obj, _, _ = indexed([2])
    for length, count in ((1 << 62, 1), (len(obj), 1), (40, 1 << 30), (100, 0)):
        bad = obj[:-INDEX_TRAILER_SIZE] + struct.pack("<QII8s", length, 0, count, b"\x89TGBIDX\n")
        with pytest.raises(CorruptObject, match="does not fit"):
            parse_index_trailer(bad[-INDEX_TRAILER_SIZE:], key="seg", object_size=len(bad))


def test_an_index_claiming_more_than_the_bound_is_refused_at_its_trailer() -> None:
    """Every reader (the consumer's FooterIndex, tgb verify) learns the bound before fetching the rest."""
    import struct

    from torch_tgb.format import MAX_INDEX_BYTES

    trailer = struct.pack("<QII8s", MAX_INDEX_BYTES + 8, 0, 1, b"\x89TGBIDX\n")
    with pytest.raises(CorruptObject, match="more than"):
        parse_index_trailer(trailer, key="seg", object_size=1 << 30)
