"""Segment objects: several consecutive TGBs of one producer in one immutable object.

A :class:`SegmentWriter` encodes each appended TGB at the next 4096-aligned
offset of the open segment (so every slice stays page-aligned when mapped)
and writes the segment with one ``put`` when it holds ``segment_tgbs`` TGBs
or ``segment_bytes`` bytes, or when the producer flushes. Only then are its
entries handed out for commit: a segment is written completely before any
manifest version names a TGB in it, so atomic visibility is unchanged. An
unwritten segment dies with its process (nothing to clean up); a written,
uncommitted one is an orphan like any uncommitted object, and a restarted
producer rewrites from its committed ``next_offset`` under a new key.

A segment of several TGBs ends with a segment index (every TGB's footer
once more, ``format/_segment_index.py``): a remote reader fetches it once
instead of one footer per TGB.

With ``segment_tgbs == 1`` (the streaming default) every TGB is its own
object, written at once, exactly as before segments existed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch_tgb.format import SLICE_ALIGN, SliceData, encode_segment_index, encode_tgb
from torch_tgb.manifest import TGBEntry
from torch_tgb.storage import ObjectStore

__all__ = ["SegmentWriter"]


@dataclass(frozen=True)
class _Open:
    """A TGB encoded into the open segment, not yet written."""

    offset: int
    start: int
    size: int
    footer_offset: int
    footer_length: int
    samples: int
    tokens: int


class SegmentWriter:
    """Packs a producer's TGBs into segment objects; returns entries once their object is written."""

    def __init__(
        self,
        store: ObjectStore,
        producer_id: str,
        key_for: Callable[[int], str],
        *,
        segment_tgbs: int = 1,
        segment_bytes: int = 256 << 20,
    ) -> None:
        if segment_tgbs < 1 or segment_bytes < 1:
            raise ValueError(f"segment_tgbs and segment_bytes must be >= 1, got {segment_tgbs=} {segment_bytes=}")
        self.store = store
        self.producer_id = producer_id
        self.key_for = key_for  # object key from the first offset in it
        self.segment_tgbs = segment_tgbs
        self.segment_bytes = segment_bytes
        # Copied at add(): the encoder's buffers view the caller's tensors, which may change after append.
        self._data = bytearray()
        self._open: list[_Open] = []

    @property
    def pending(self) -> int:
        """TGBs encoded into the open segment and not yet written."""
        return len(self._open)

    def add(self, slices: Sequence[SliceData], *, offset: int, samples: int, tokens: int) -> list[TGBEntry]:
        """Encode one TGB; returns the entries of a segment this call wrote (else ``[]``)."""
        base = len(self._data) + (-len(self._data) % SLICE_ALIGN)
        buffers, obj = encode_tgb(slices, base=base)
        self._data += bytes(base - len(self._data))
        for buffer in buffers:
            self._data += buffer
        self._open.append(_Open(offset, base, obj.size, obj.footer_offset, obj.footer_length, samples, tokens))
        if len(self._open) >= self.segment_tgbs or len(self._data) >= self.segment_bytes:
            return self.flush()
        return []

    def flush(self) -> list[TGBEntry]:
        """Write the open segment (if any) with one ``put``; its entries, ready to commit."""
        if not self._open:
            return []
        key = self.key_for(self._open[0].offset)
        single = len(self._open) == 1
        if not single:
            self._data += encode_segment_index(self._data, [(t.footer_offset, t.size) for t in self._open])
        self.store.put(key, self._data)
        total = len(self._data)
        entries = [
            TGBEntry(key, t.size, t.footer_offset, t.footer_length, self.producer_id, t.offset, t.samples,
                     t.tokens, start=t.start, object_size=None if single else total)
            for t in self._open
        ]
        self._data, self._open = bytearray(), []
        return entries
