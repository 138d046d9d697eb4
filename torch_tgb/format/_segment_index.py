"""The segment index: every TGB footer of a segment object, once more, at its end.

A segment object of several TGBs ends with an index (``docs/format.md``)::

    rows            count x 16 B   footer_offset u64 | size u64   (one per TGB, ascending)
    footers         the bytes [footer_offset, size) of each TGB, in row order
                    (its footer and its trailer, byte for byte)
    index trailer   24 B   index_length u64 | index_crc32c u32 | count u32 | magic "\\x89TGBIDX\\n"

``index_length`` counts rows and footers (not the trailer); the CRC covers
them. A remote reader fetches the object's tail once (one request, two when
the index is larger than the first tail read) and then has the footer of
every TGB of the segment: a cold stream over S3 costs about one request per
step (its slice) instead of two (footer and slice). Readers that know nothing
of the index never read these bytes (manifest entries address each TGB), and a
segment without an index (older writers, one-TGB objects) ends with a TGB
trailer, whose magic differs: :func:`parse_index_trailer` returns None for it.

Untrusted input, like every footer: sizes are bounded by the object before
anything is allocated, the index CRC is checked, and each footer taken from
the index is parsed by :func:`parse_footer` (its own trailer CRC) and then
read against the manifest entry's numbers like a footer read in place.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from torch_tgb.errors import CorruptObject
from torch_tgb.format._contract import Contract
from torch_tgb.format._crc import crc32c_of
from torch_tgb.format._footer import parse_footer
from torch_tgb.format._footer_view import Footer
from torch_tgb.format._spec import TRAILER_MAGIC, TRAILER_SIZE

if TYPE_CHECKING:
    from torch_tgb.storage import ObjectStore

__all__ = [
    "INDEX_MAGIC",
    "INDEX_TAIL_READ",
    "INDEX_TRAILER_SIZE",
    "MAX_INDEX_BYTES",
    "SegmentIndex",
    "encode_segment_index",
    "parse_index_trailer",
    "read_segment_index",
    "segment_index",
]

INDEX_MAGIC = b"\x89TGBIDX\n"
_INDEX_TRAILER = struct.Struct("<QII8s")
INDEX_TRAILER_SIZE = _INDEX_TRAILER.size  # 24, the size of a TGB trailer: one tail read tells them apart
_ROW = np.dtype([("footer_offset", "<u8"), ("size", "<u8")])
#: no real index is larger (~250 bytes per TGB of a 256 MiB segment); a bigger claim is corrupt
MAX_INDEX_BYTES = 64 << 20
#: bytes read from a segment's end to find its index (and, usually, all of it)
INDEX_TAIL_READ = 256 << 10


def encode_segment_index(data: bytes | bytearray | memoryview, tgbs: Sequence[tuple[int, int]]) -> bytes:
    """The index of the TGBs ``(footer_offset, size)`` of the segment bytes ``data``, trailer included."""
    with memoryview(data) as view:  # released before the caller grows ``data`` (a bytearray) by the index
        return segment_index(tgbs, [bytes(view[fo:size]) for fo, size in tgbs])


def segment_index(tgbs: Sequence[tuple[int, int]], footers: Sequence[bytes]) -> bytes:
    """The index of the TGBs ``(footer_offset, size)`` whose bytes ``[footer_offset, size)`` are ``footers``."""
    if len(footers) != len(tgbs) or any(len(f) != size - fo for f, (fo, size) in zip(footers, tgbs)):
        raise ValueError("segment index: one footer per TGB, each its bytes [footer_offset, size)")
    rows = np.array(tgbs, dtype=np.uint64).reshape(-1, 2).view(_ROW).reshape(-1)
    body = b"".join([rows.tobytes(), *footers])
    return body + _INDEX_TRAILER.pack(len(body), crc32c_of(body), len(tgbs), INDEX_MAGIC)


def parse_index_trailer(tail: bytes, *, key: str, object_size: int) -> tuple[int, int] | None:
    """``(index_offset, count)`` from an object's last 24 bytes; None when it ends with a TGB (no index)."""
    if len(tail) < INDEX_TRAILER_SIZE:
        raise CorruptObject(f"object {key!r}: truncated, {len(tail)} bytes cannot hold a trailer")
    length, _crc, count, magic = _INDEX_TRAILER.unpack(tail[-INDEX_TRAILER_SIZE:])
    if magic == TRAILER_MAGIC:
        return None
    if magic != INDEX_MAGIC:
        raise CorruptObject(f"object {key!r}: ends with neither a TGB trailer nor a segment index (magic {magic!r})")
    # every row names a footer of at least a trailer: count bounds the length from below
    if count < 1 or length > object_size - INDEX_TRAILER_SIZE or length < count * (_ROW.itemsize + TRAILER_SIZE):
        raise CorruptObject(f"object {key!r}: segment index of {length} bytes for {count} TGBs does not fit "
                            f"an object of {object_size} bytes")
    if length > MAX_INDEX_BYTES:  # checked before a reader fetches the rest of it
        raise CorruptObject(f"object {key!r}: segment index of {length} bytes (more than {MAX_INDEX_BYTES})")
    return object_size - INDEX_TRAILER_SIZE - length, count


class SegmentIndex:
    """The parsed index of segment object ``key``: the footer of any TGB of it, with no further read."""

    def __init__(self, data: bytes, *, key: str, object_size: int) -> None:
        """``data``: the object's bytes from the index's first row to its end (trailer included)."""
        where = f"object {key!r}, segment index"
        found = parse_index_trailer(data, key=key, object_size=object_size)
        if found is None:
            raise CorruptObject(f"{where}: the object ends with a TGB trailer, not an index")
        index_offset, count = found
        body = memoryview(data)[: len(data) - INDEX_TRAILER_SIZE]
        if len(data) != object_size - index_offset:
            raise CorruptObject(f"{where}: truncated, got {len(data)} of {object_size - index_offset} bytes")
        _length, crc, _count, _magic = _INDEX_TRAILER.unpack(bytes(data[-INDEX_TRAILER_SIZE:]))
        if crc32c_of(body) != crc:
            raise CorruptObject(f"{where}: CRC32C mismatch (index corrupted)")
        rows = np.frombuffer(body, dtype=_ROW, count=count)  # the trailer check bounds count by the length
        fo, size = rows["footer_offset"].astype(np.int64), rows["size"].astype(np.int64)  # >= 2**63: negative
        spans = size - fo
        ends = np.cumsum(spans) + count * _ROW.itemsize
        if (
            (fo < 0).any() or (spans <= TRAILER_SIZE).any() or (size > index_offset).any()
            or (count > 1 and (fo[1:] < size[:-1]).any()) or int(ends[-1]) != len(body)
        ):
            raise CorruptObject(f"{where}: rows out of order, overlapping, outside the TGB data or not tiling the index")
        self.key = key
        self.object_size = object_size
        self._body = bytes(body)
        self._at = {int(f): (int(e - s), int(e), int(z)) for f, s, e, z in zip(fo, spans, ends, size)}

    def __len__(self) -> int:
        return len(self._at)

    def footer(self, footer_offset: int, size: int, *, contract: Contract | None = None) -> Footer | None:
        """The footer of the TGB at ``[.., size)`` with its footer at ``footer_offset``; None if not indexed.

        Parsed as one read in place is, judged by the namespace's ``contract`` too.
        """
        found = self._at.get(footer_offset)
        if found is None or found[2] != size:
            return None
        start, end, _ = found
        return parse_footer(self._body[start:end], key=self.key, size=size, footer_offset=footer_offset,
                            contract=contract)


def read_segment_index(
    store: ObjectStore, key: str, object_size: int, *, tail: int = INDEX_TAIL_READ
) -> SegmentIndex | None:
    """The index of segment object ``key`` (``object_size`` bytes), or None when it has none.

    One range read of the object's last ``tail`` bytes, a second one only for
    a longer index. (The consumer's FooterIndex does the same for many
    objects at once, in one batched call.)
    """
    start = max(0, object_size - tail)
    data = store.get_range(key, start, object_size)
    found = parse_index_trailer(data, key=key, object_size=object_size)
    if found is None:
        return None
    if found[0] < start:
        data = store.get_range(key, found[0], start) + data
        start = found[0]
    return SegmentIndex(data[found[0] - start :], key=key, object_size=object_size)
