"""Segment objects: several consecutive TGBs of one producer in one immutable object.

A :class:`SegmentWriter` encodes each appended TGB at the next 64-byte aligned
offset of the open segment (its slices on 64 bytes, or on pages when they are
large: ``format.slice_alignment``; an aligned view of every dtype when mapped),
writes its bytes at once through the store's writer of that object
(``ObjectStore.open_writer``: a local store takes them straight into a
temporary file, any other store gathers them in memory), and publishes the
segment when it holds ``segment_tgbs`` TGBs or ``segment_bytes`` bytes, or
when the producer flushes. Only then are its entries handed out for commit:
a segment is published completely before any manifest version names a TGB
in it, so atomic visibility is unchanged. An unpublished segment dies with
its process, leaving a partial write (a local temp file, an S3 multipart
upload: ``ObjectStore.list_partial``) that names the segment's key, so the
incarnation that owned it; a published, uncommitted one is an orphan like
any uncommitted object. A restarted producer rewrites from its committed
``next_offset`` under a new key and, once its registration has fenced the
older incarnations, removes their partial writes
(:func:`remove_fenced_partials`); the Reclaimer removes those of producers
that do not come back.

A segment of several TGBs ends with a segment index (every TGB's footer
once more, ``format/_segment_index.py``): a remote reader fetches it once
instead of one footer per TGB.

With ``segment_tgbs == 1`` (the streaming default) every TGB is its own
object, published at once, exactly as before segments existed. With more, a
full segment is published by a background thread (an ``fsync`` and a rename
locally, the upload elsewhere) while the next one fills (at most one in
flight, so at most two segments open): packing and the object store's write
overlap. Its entries go to ``on_written`` from that thread as soon as it is
published; its error is raised by the next ``add`` or ``flush`` (which
waits for it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from torch_tgb.errors import FencedError, ObjectNotFound, TGBError
from torch_tgb.format import V3_SLICE_ALIGN, TGBObject, segment_index
from torch_tgb.manifest import TGBEntry
from torch_tgb.manifest.keys import parse_object_name
from torch_tgb.manifest.records import DATA_PREFIX
from torch_tgb.storage import ObjectStore
from torch_tgb.storage._writer import ObjectWriter

__all__ = ["SegmentWriter", "remove_fenced_partials"]

log = logging.getLogger(__name__)

#: encodes one TGB at ``base`` of the object ``key``: its buffers (the footer last) and where its footer is
Encoder = Callable[[int, str], "tuple[list[memoryview | bytes], TGBObject]"]


def remove_fenced_partials(store: ObjectStore, producer_id: str, epoch: int) -> tuple[int, int]:
    """Remove the partial writes of ``producer_id``'s incarnations below ``epoch``; (count, bytes).

    Call it only once ``epoch`` is committed: from then on every older
    incarnation is fenced, so none of its writes can ever be committed (a
    zombie still writing one fails at its publish or at its commit, as it
    would anyway). Writes whose key names no epoch are left to the Reclaimer.
    """
    doomed = []
    for partial in store.list_partial(f"{DATA_PREFIX}{producer_id}/"):
        name = None if partial.key is None else parse_object_name(partial.key)
        if name is not None and name.producer == producer_id and name.epoch < epoch:
            doomed.append(partial)
    if doomed:
        store.delete_partial(doomed)
        log.info("%s: producer %r removed %d partial write(s) of its fenced incarnations (%d bytes)",
                 store.url, producer_id, len(doomed), sum(p.size or 0 for p in doomed))
    return len(doomed), sum(p.size or 0 for p in doomed)


@dataclass(frozen=True)
class _Open:
    """A TGB written into the open segment, not yet published."""

    offset: int
    start: int
    size: int
    footer_offset: int
    footer_length: int
    samples: int
    tokens: int
    footer: bytes  # bytes [footer_offset, size): the segment index repeats them
    slice_record: int = 0
    control: int = 0


@dataclass
class _Segment:
    """The open segment: its writer and the TGBs written into it."""

    writer: ObjectWriter
    tgbs: list[_Open]


class SegmentWriter:
    """Packs a producer's TGBs into segment objects; returns entries once their object is published."""

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
        self._open: _Segment | None = None
        self.on_written = on_written  # given: segments of several TGBs are published in the background
        self._writer: ThreadPoolExecutor | None = None
        self._writing: tuple[Future[None], int] | None = None  # (the publish in flight, its TGBs)
        #: a write or publish that failed: the TGBs it held are lost, so nothing may be added after them
        self._failed: BaseException | None = None

    @property
    def pending(self) -> int:
        """TGBs encoded and not yet published (in the open segment, or in the one being published)."""
        return (len(self._open.tgbs) if self._open else 0) + (self._writing[1] if self._writing is not None else 0)

    def add(self, encode: Encoder, *, offset: int, samples: int, tokens: int, control: int = 0) -> list[TGBEntry]:
        """Encode one TGB (``encode(base, key)``: its buffers at ``base`` of object ``key``) and write it; returns
        the entries of a segment this call published (else ``[]``). ``control``: the control version that
        shaped it, recorded in its entry."""
        self._check_alive()
        if self._open is None:
            hint = 0 if self.segment_tgbs == 1 else self.segment_bytes
            self._open = _Segment(self.store.open_writer(self.key_for(offset), size_hint=hint), [])
        segment = self._open
        end = segment.writer.size
        base = end + (-end % V3_SLICE_ALIGN)  # encode_tgb pads its first slice to a page where it pages them
        buffers, obj = encode(base, segment.writer.key)
        # written (copied) now: the encoder's buffers view the caller's tensors, which may change after append
        try:
            written = segment.writer.write_at(base, buffers)
        except BaseException as e:
            self._fail(e)
            raise
        if written != obj.size:  # the segment's bytes and its TGB table disagree: the segment cannot be published
            error = ValueError(f"segment: TGB at offset {offset} encoded to other than its {obj.size - base} bytes")
            self._fail(error)
            raise error
        footer = bytes(buffers[-1])  # encode_tgb ends with the footer, bytes [footer_offset, size)
        segment.tgbs.append(_Open(offset, base, obj.size, obj.footer_offset, obj.footer_length, samples, tokens,
                                  footer, obj.slice_record, control))
        if len(segment.tgbs) >= self.segment_tgbs or obj.size >= self.segment_bytes:
            if self.segment_tgbs == 1 or self.on_written is None:
                return self.flush()
            self._wait()  # one publish in flight at a time
            taken, self._open = segment, None
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"tgb-segments-{self.producer_id}")
            self._writing = (self._writer.submit(self._publish_and_hand_on, taken), len(taken.tgbs))
        return []

    def flush(self) -> list[TGBEntry]:
        """Publish the open segment (if any), after the one in flight; its entries, ready to commit."""
        self._wait()
        self._check_alive()
        if self._open is None:
            return []
        taken, self._open = self._open, None
        try:
            return self._publish(taken)
        except BaseException as e:
            self._fail(e)
            raise

    def close(self) -> None:
        """Wait for the publish in flight (its entries are dropped: an orphan if it lands), drop the open segment."""
        try:
            if self._writing is not None:
                self._writing[0].exception()
        finally:
            self._writing = None
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None
            if self._open is not None:
                self._open.writer.abort()
                self._open = None

    def settle(self) -> None:
        """Wait for the segment being published in the background (its entries handed on; its error raised)."""
        self._wait()

    def _wait(self) -> None:
        if self._writing is not None:
            future, self._writing = self._writing[0], None
            try:
                future.result()
            except BaseException as e:
                self._fail(e)
                raise

    def _fail(self, error: BaseException) -> None:
        """A segment is lost: drop the open one too; every later add or flush refuses (no gap may follow)."""
        self._failed = error
        if self._open is not None:
            self._open.writer.abort()
            self._open = None

    def _check_alive(self) -> None:
        if self._failed is not None:
            raise TGBError(
                f"{self.store.url}: producer {self.producer_id!r} lost a segment to an earlier error "
                f"({self._failed!r}); close it and start it again to resume from its last commit"
            ) from self._failed

    def _publish_and_hand_on(self, segment: _Segment) -> None:
        entries = self._publish(segment)
        assert self.on_written is not None  # only then are segments published in the background
        self.on_written(entries)

    def _publish(self, segment: _Segment) -> list[TGBEntry]:
        """Publish one segment (its index appended when it holds several TGBs); its entries."""
        writer, tgbs = segment.writer, segment.tgbs
        try:
            single = len(tgbs) == 1
            if not single:
                writer.write_at(writer.size, [segment_index([(t.footer_offset, t.size) for t in tgbs],
                                                            [t.footer for t in tgbs])])
            total = writer.size
            writer.commit()
        except ObjectNotFound as e:
            writer.abort()
            # Our own partial write is gone: only a newer incarnation of this producer removes it (it removes
            # its fenced predecessors' partial writes at start, remove_fenced_partials), or the Reclaimer once
            # this incarnation is fenced. Say so, as the next commit would.
            raise FencedError(
                f"{self.store.url}: producer {self.producer_id!r}: the segment being written ({writer.key!r}) "
                "was removed before it was published: a newer incarnation of this producer started and removed "
                "its fenced predecessors' partial writes"
            ) from e
        except BaseException:
            writer.abort()
            raise
        return [
            TGBEntry(writer.key, t.size, t.footer_offset, t.footer_length, self.producer_id, t.offset, t.samples,
                     t.tokens, start=t.start, object_size=None if single else total, slice_record=t.slice_record,
                     control=t.control)
            for t in tgbs
        ]
