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
object, written at once, exactly as before segments existed. With more, a
full segment is written by a background thread while the next one fills
(at most one write in flight, so at most two segments in memory): packing
and the object store's write overlap. Its entries go to ``on_written`` from
that thread as soon as it is written; its error is raised by the next
``add`` or ``flush`` (which waits for it).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from torch_tgb.format import SLICE_ALIGN, SliceData, encode_segment_index, encode_tgb
from torch_tgb.manifest import TGBEntry
from torch_tgb.storage import ObjectStore
from torch_tgb.storage._base import Buffer

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
        on_written: Callable[[list[TGBEntry]], None] | None = None,
    ) -> None:
        if segment_tgbs < 1 or segment_bytes < 1:
            raise ValueError(f"segment_tgbs and segment_bytes must be >= 1, got {segment_tgbs=} {segment_bytes=}")
        self.store = store
        self.producer_id = producer_id
        self.key_for = key_for  # object key from the first offset in it
        self.segment_tgbs = segment_tgbs
        self.segment_bytes = segment_bytes
        # Copied at add(): the encoder's buffers view the caller's tensors, which may change after append.
        self._data = _Buffer()
        self._open: list[_Open] = []
        self.on_written = on_written  # given: segments of several TGBs are written in the background
        self._writer: ThreadPoolExecutor | None = None
        self._writing: tuple[Future[None], int] | None = None  # (the write in flight, its TGBs)

    @property
    def pending(self) -> int:
        """TGBs encoded and not yet written (in the open segment, or in the one being written)."""
        return len(self._open) + (self._writing[1] if self._writing is not None else 0)

    def add(self, slices: Sequence[SliceData], *, offset: int, samples: int, tokens: int) -> list[TGBEntry]:
        """Encode one TGB; returns the entries of a segment this call wrote (else ``[]``)."""
        base = len(self._data) + (-len(self._data) % SLICE_ALIGN)
        buffers, obj = encode_tgb(slices, base=base)
        self._data.extend(buffers, at=base, end=obj.size, capacity=self.segment_bytes)
        self._open.append(_Open(offset, base, obj.size, obj.footer_offset, obj.footer_length, samples, tokens))
        if len(self._open) >= self.segment_tgbs or len(self._data) >= self.segment_bytes:
            if self.segment_tgbs == 1 or self.on_written is None:
                return self.flush()
            self._wait()  # one write in flight at a time
            data, open_ = self._take()
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"tgb-segments-{self.producer_id}")
            self._writing = (self._writer.submit(self._write_and_hand_on, data, open_), len(open_))
        return []

    def flush(self) -> list[TGBEntry]:
        """Write the open segment (if any) with one ``put``, after the one in flight; its entries, ready to commit."""
        self._wait()
        return self._write(*self._take()) if self._open else []

    def close(self) -> None:
        """Wait for the write in flight (its entries are dropped: an orphan if it lands) and stop the thread."""
        try:
            if self._writing is not None:
                self._writing[0].exception()
        finally:
            self._writing = None
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None
            self._data.close()
            self._data, self._open = _Buffer(), []

    def settle(self) -> None:
        """Wait for the segment being written in the background (its entries handed on; its error raised)."""
        self._wait()

    def _wait(self) -> None:
        if self._writing is not None:
            future, self._writing = self._writing[0], None
            future.result()

    def _write_and_hand_on(self, data: _Buffer, open_: list[_Open]) -> None:
        entries = self._write(data, open_)
        assert self.on_written is not None  # only then are writes in the background
        self.on_written(entries)

    def _take(self) -> tuple[_Buffer, list[_Open]]:
        taken = self._data, self._open
        self._data, self._open = _Buffer(), []
        return taken

    def _write(self, data: _Buffer, open_: list[_Open]) -> list[TGBEntry]:
        """Write one segment (its index appended when it holds several TGBs); its entries."""
        try:
            key = self.key_for(open_[0].offset)
            single = len(open_) == 1
            if not single:
                index = encode_segment_index(data.view(), [(t.footer_offset, t.size) for t in open_])
                data.extend([index], at=len(data), end=len(data) + len(index), capacity=0)
            self.store.put(key, data.view())
            total = len(data)
            return [
                TGBEntry(key, t.size, t.footer_offset, t.footer_length, self.producer_id, t.offset, t.samples,
                         t.tokens, start=t.start, object_size=None if single else total)
                for t in open_
            ]
        finally:
            data.close()


class _Buffer:
    """The bytes of the open segment, in an anonymous memory map.

    A bytearray grown by ``+=`` copies itself whenever it outgrows its
    allocation, so writing a 64 MiB segment held up to twice that at the copy.
    An anonymous map is reserved once at the segment's expected size and costs
    memory only for the pages written; a TGB that does not fit moves it to one
    twice as large (rare: segments close at ``segment_bytes``).
    """

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def extend(self, buffers: Sequence[Buffer], *, at: int, end: int, capacity: int) -> None:
        """Write ``buffers`` from offset ``at`` (zeros before it stay zero); they end at ``end``."""
        size = 0 if self._map is None else len(self._map)
        if end > size:
            grown = mmap.mmap(-1, max(end, 2 * size, capacity + (1 << 20)))  # zero-filled, lazily backed
            if self._map is not None:
                grown[: self._len] = self._map[: self._len]
                self._map.close()
            self._map = grown
        assert self._map is not None  # reserved just above
        pos = at
        for buffer in buffers:
            view = memoryview(buffer).cast("B")
            self._map[pos : pos + len(view)] = view
            pos += len(view)
        if pos != end:
            raise ValueError(f"segment: encoded {pos - at} bytes, the TGB says {end - at}")
        self._len = end

    def view(self) -> memoryview:
        return memoryview(self._map)[: self._len] if self._map is not None else memoryview(b"")

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view still held (by a failed put's traceback): the collector unmaps it
                pass
            self._map = None
