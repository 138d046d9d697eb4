"""``Producer``: write TGB objects at once, commit them in the background.

``append()`` cuts the global batch by the layout and writes the TGB object
with one ``put`` (no coordination with anybody), then queues its manifest
entry. A background thread commits queued entries when the commit policy
says so (see :mod:`torch_tgb.manifest.commit` for the protocol). Offsets
give exactly-once: each ``producer_id`` commits offsets 0, 1, 2, ... in
order; a restarted producer resumes at :attr:`Producer.resume_offset`.

Backpressure: ``append`` blocks while ``max_pending`` entries wait for their
commit, and, with ``max_lag``, while the namespace is more than ``max_lag``
steps ahead of the checkpoints' safe boundary.

This module is the facade: checks, ``dataset.json``, object writes and the
lifecycle. The background thread, the pending queue and the waiting for room
live in ``_commit_loop.py``; the tuning in ``config.py``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any

import torch

from torch_tgb.errors import SchemaMismatch, TGBError
from torch_tgb.format import (
    Codec,
    TGBObject,
    check_codecs,
    check_schema,
    encode_batch,
    parse_codec,
    schema_fingerprint,
    schema_of,
)
from torch_tgb.layout import Layout
from torch_tgb.lineage.capture import LineageCapture
from torch_tgb.manifest import Committer, DatasetInfo, JobSpec, Manifest, TGBEntry, validate_producer_id
from torch_tgb.manifest.keys import object_name
from torch_tgb.manifest._producer_state import check_skipped
from torch_tgb.manifest.records import check_metadata, encode_producer_state
from torch_tgb.manifest.watermarks import Retention, live_checkpoints
from torch_tgb.producer._commit_loop import CommitLoop
from torch_tgb.producer._segment import SegmentWriter, remove_fenced_partials
from torch_tgb.producer.config import ProducerConfig
from torch_tgb.producer.policies import CommitPolicy, make_policy
from torch_tgb.producer.stats import ProducerStats
from torch_tgb.storage import ObjectStore, ensure_conditional_writes, open_store

__all__ = ["Producer", "object_key"]

log = logging.getLogger(__name__)


def _parse_codecs(codecs: Mapping[str, str | Codec] | None) -> dict[str, Codec]:
    """``codecs`` parsed, their libraries imported now (``MissingExtra`` before anything is written)."""
    out = {}
    for name, spec in (codecs or {}).items():
        try:
            out[name] = spec if isinstance(spec, Codec) else parse_codec(spec)
        except ValueError as e:
            raise ValueError(f"codecs[{name!r}]: {e}") from e
        out[name].backend.library()
    return out


def object_key(producer_id: str, epoch: int, offset: int) -> str:
    """``data/<producer_id>/e<epoch:06d>-o<offset:012d>-<rand>.tgb``: unique per write attempt."""
    return object_name(producer_id, epoch, offset, secrets.token_hex(4))


class Producer:
    """Appends global batches as TGBs to a namespace under a stable ``producer_id``.

    ``job``: the job of declared shards this producer belongs to
    (``JobSpec.sharded(prefix, n)``, its id ``job.producer_id(i)``). The first
    producer of a fresh namespace declares it; a producer outside the
    namespace's job raises :class:`~torch_tgb.errors.JobMismatch`, and one
    whose shard is already done :class:`~torch_tgb.errors.ShardComplete`,
    both before anything is written. A producer whose id belongs to the
    namespace's job follows its rules with or without ``job``.

    ``codecs``: tensor name -> codec spec (``"zstd"``, ``"zstd:1+delta:3x14x14"``;
    ``docs/multimodal.md``, *Compression at rest*): those tensors are stored
    compressed (format version 4, which older readers refuse; needs the
    ``compress`` extra). A producer that creates the namespace records its
    choice in ``dataset.json``'s schema, so readers know to decode ahead.
    """

    def __init__(
        self,
        ns: str | ObjectStore,
        *,
        producer_id: str,
        layout: Layout,
        commit_policy: str | CommitPolicy = "dac",
        max_lag: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        schema: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        config: ProducerConfig | None = None,
        job: JobSpec | None = None,
        codecs: Mapping[str, str | Codec] | None = None,
    ) -> None:
        self.producer_id = validate_producer_id(producer_id)
        self.codecs = _parse_codecs(codecs)
        self._codecs_checked = not self.codecs
        if not isinstance(layout, Layout):
            raise TypeError(f"layout must be a torch_tgb.Layout, got {type(layout).__name__}")
        if max_lag is not None and max_lag < 1:
            raise ValueError(f"max_lag={max_lag} must be >= 1 or None")
        self._metadata = check_metadata(metadata)
        self.layout = layout
        self.max_lag = max_lag
        self.config = config or ProducerConfig()
        self.policy = make_policy(commit_policy)
        self._owns_store = not isinstance(ns, ObjectStore)
        self.store = open_store(ns, storage_options)
        self._dataset: DatasetInfo | None = None
        ensure_conditional_writes(self.store)  # one read once the namespace was probed
        self.manifest = Manifest(self.store, snapshot_every=self.config.snapshot_every)
        self._check_dataset_at_start(schema)
        self._committer = Committer(self.manifest, self.producer_id, job=job, crash_hook=self.config.crash_hook)
        try:
            state = self._committer.start()  # registration: any older incarnation is fenced from here on
        except BaseException:  # ShardComplete, JobMismatch, NamespaceSealed, ...: nothing was written
            if self._owns_store:
                self.store.close()
            raise
        self.epoch = state.epoch
        self._remove_fenced_partials()
        if max_lag is not None:
            self._check_max_lag(max_lag)
        self.resume_offset = state.next_offset
        #: the pipeline state committed with ``resume_offset`` (``append(..., state=)``); None if none
        #: (a large one lives in its own object: read from there, by this producer only)
        resumed = self._committer.resume_state
        self.resume_state: dict[str, Any] | None = None if resumed is None else dict(resumed)
        self._next_offset = state.next_offset
        self._closed = False
        self._saved: dict[int, Any] = {}  # offset -> encoded append(state=) of a TGB not yet written
        self._skips: dict[int, dict[str, int]] = {}  # offset -> append(skipped=) of a TGB not yet written
        self._segments = SegmentWriter(
            self.store, self.producer_id, lambda offset: object_key(self.producer_id, self.epoch, offset),
            segment_tgbs=self.config.segment_tgbs, segment_bytes=self.config.segment_bytes,
            on_written=self._queue if self.config.write_behind else None,
        )
        #: the deltas of the lineage index, written as versions commit (``lineage/capture.py``)
        self._lineage = LineageCapture(self.store, self.producer_id, dp=layout.dp)
        self._loop = CommitLoop(
            store=self.store, producer_id=self.producer_id, committer=self._committer, policy=self.policy,
            config=self.config, max_lag=max_lag, epoch=self.epoch, committed_offsets=self.resume_offset,
            on_commit=self._committed,
        )

    def _remove_fenced_partials(self) -> None:
        """The partial writes of the incarnations this start fenced (a killed run's open segment) go now.

        Best effort: a store that refuses is logged, the Reclaimer gets them later.
        """
        try:
            remove_fenced_partials(self.store, self.producer_id, self.epoch)
        except TGBError as e:
            log.warning("%s: producer %r could not remove the partial writes of its fenced incarnations (%s); "
                        "`tgb reclaim` removes them", self.store.url, self.producer_id, e)

    def _check_max_lag(self, max_lag: int) -> None:
        """Warn now if the live checkpoints show a retention that ``max_lag`` cannot let the trainer keep.

        A trainer keeping K checkpoints every C steps needs ``max_lag >= C * K``
        (``Retention``); with less this producer would pause for good as soon
        as it is that far ahead. A warning, not a refusal: the watermarks may
        be another run's, and with fewer than two live ones nothing can be told.
        """
        shortfall = Retention.of(live_checkpoints(self.store)).shortfall(max_lag)
        if shortfall is not None:
            log.warning("%s: producer %r: %s", self.store.url, self.producer_id, shortfall)

    # --- dataset.json --------------------------------------------------------

    def _check_dataset_at_start(self, schema: Mapping[str, Any] | None) -> None:
        if schema is not None:
            self._dataset = self._ensure_dataset(dict(schema))
            return
        stored = self.manifest.dataset()
        if stored is not None:
            differs = []
            if dict(stored.layout) != self.layout.to_json():
                differs.append(f"layout {self.layout.to_json()} vs {dict(stored.layout)}")
            if dict(stored.metadata) != self._metadata:
                differs.append(f"metadata {self._metadata} vs {dict(stored.metadata)}")
            if differs:
                ours = schema_fingerprint(self.layout, stored.schema, self._metadata)
                raise SchemaMismatch(
                    f"{self.store.url}: producer {self.producer_id!r} fingerprint {ours} disagrees with the "
                    f"namespace's {stored.fingerprint}: {'; '.join(differs)}"
                )
            self._dataset = stored

    def _ensure_dataset(self, schema: dict[str, Any]) -> DatasetInfo:
        # the codecs chosen, as a hint to readers (a plain read path for a compressed namespace would decode
        # on the trainer's thread); every footer says itself how its tensors are stored
        schema = {name: {**spec, "codec": self.codecs[name].spec} if name in self.codecs else spec
                  for name, spec in schema.items()}
        return self.manifest.ensure_dataset(self.layout, schema, self._metadata)

    # --- appending -----------------------------------------------------------

    def append(
        self, batch: Mapping[str, torch.Tensor], *, offset: int | None = None, state: Mapping[str, Any] | None = None,
        skipped: Mapping[str, int] | None = None, control: int = 0,
    ) -> bool:
        """Write one global batch as offset ``offset`` (default: the next one); queue its commit.

        Returns ``False`` without writing if ``offset`` is below
        :attr:`resume_offset` (already committed by an earlier incarnation).
        An offset other than the next expected one raises ``ValueError``.

        ``state``: the pipeline's state *after* this batch (the state from which
        offset + 1 is produced), a JSON object of at most 32 KiB. It is committed
        in the same manifest version as the offset, and a restarted producer
        reads it back as :attr:`resume_state` (seed 000 §5.3).

        ``skipped``: the samples the pipeline dropped up to this batch, by
        reason (cumulative, as ``produce()`` counts them); committed with the
        offset in this producer's record, where ``tgb inspect`` shows them.
        ``control``: the version of the control record that shaped this batch
        (``Mix(control=)``; 0: none), recorded in its manifest entry.
        """
        self._loop.raise_if_failed()
        if self._loop.closing:
            raise TGBError(f"{self.store.url}: producer {self.producer_id!r} is closed")
        expected = self._next_offset
        if offset is None:
            offset = expected
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, got {offset!r}")
        if offset < self.resume_offset:
            self._loop.count_skipped()
            return False
        if offset != expected:
            raise ValueError(
                f"{self.store.url}: producer {self.producer_id!r} expected offset={expected}, got {offset=} "
                "(offsets are appended consecutively from resume_offset)"
            )
        if isinstance(control, bool) or not isinstance(control, int) or control < 0:
            raise ValueError(f"{self.store.url}: producer {self.producer_id!r} {offset=}: control={control!r} must be "
                             "a control version (an int >= 0)")
        saved = None if state is None else encode_producer_state(state, producer_id=self.producer_id, offset=offset)
        skips = None if skipped is None else check_skipped(
            skipped, what=f"{self.store.url}: producer {self.producer_id!r} {offset=}")
        samples = self.layout.check_batch(batch)
        schema = schema_of(batch)
        if self._dataset is None:
            self._dataset = self._ensure_dataset(schema)
        else:
            try:
                check_schema(schema, self._dataset.schema)
            except SchemaMismatch as e:
                raise SchemaMismatch(
                    f"{self.store.url}: producer {self.producer_id!r} {offset=}: {e} "
                    f"(namespace fingerprint {self._dataset.fingerprint})"
                ) from e
        self._loop.wait_for_room()
        tokens = sum(int(batch[k].numel()) for k in self.layout.seq_keys[:1])
        if saved is not None:
            self._saved[offset] = saved  # committed with its entry, once the segment is written
        if skips is not None:
            self._skips[offset] = skips
        if not self._codecs_checked:  # a key the batch lacks, a block of another size: refused before a write
            check_codecs(self.layout.cut(batch)[0], self.codecs)
            self._codecs_checked = True
        self._lineage.add(offset, batch)
        layout, codecs = self.layout, self.codecs  # encoded into the segment as one copy, no object per slice

        def encode(base: int, key: str) -> tuple[list[memoryview | bytes], TGBObject]:
            return encode_batch(batch, layout, base=base, key=key, codecs=codecs)

        self._queue(self._segments.add(encode, offset=offset, samples=samples, tokens=tokens, control=control))
        self._next_offset = offset + 1
        return True

    def _queue(self, written: list[TGBEntry]) -> None:
        """Hand the entries of a just-written object (one TGB or a segment) to the commit loop."""
        if not written:
            return
        self._hook("after_object_write")
        for entry in written:
            self._loop.add(entry, entry.length, self._saved.pop(entry.offset, None), self._skips.pop(entry.offset, None))

    def _committed(self, number: int) -> None:
        """On the committer thread: version ``number`` committed entries of ours; write its lineage delta."""
        version = self.manifest.try_read_version(number)
        if version is not None:
            self._lineage.committed(version)

    def _hook(self, point: str) -> None:
        if self.config.crash_hook is not None:
            self.config.crash_hook(point)

    # --- committing, stopping --------------------------------------------------

    def flush(self) -> None:
        """Block until every appended entry is committed (visible to readers)."""
        self._loop.raise_if_failed()
        self._queue(self._segments.flush())
        self._loop.flush()

    def close(self, seal: bool = False) -> None:
        """Commit what is pending with this producer's end mark, stop. Idempotent.

        ``seal=False`` marks it ``closed`` (finished for now; it may come back
        with the same ``producer_id`` unless the stream is sealed meanwhile).
        ``seal=True`` marks it ``done`` (finished for good). In a namespace of
        declared shards the commit that makes the last declared shard done
        seals it (end of stream for readers). Without declared shards it ends
        the stream once no producer is still running: sealed by this commit
        if no other registered producer is ``open``, else by the last of them
        to close with ``seal=True`` (or by ``tgb seal``); the others keep
        committing normally until then. :attr:`sealed` says whether it is sealed.
        """
        if self._closed:
            if seal and self._loop.committed_mark != "done":
                raise TGBError(f"{self.store.url}: producer {self.producer_id!r} is closed; cannot mark it done now")
            return
        if not self._loop.closing:
            try:
                self._queue(self._segments.flush())
            except BaseException:
                self.abort()
                raise
        self._loop.stop("done" if seal else "closed")
        self._closed = True
        self._segments.close()
        self._lineage.close()
        if self._owns_store:
            self.store.close()
        self._loop.raise_if_failed()

    def abort(self) -> None:
        """Stop without committing what is pending (those objects stay invisible orphans)."""
        self._loop.abort()
        self._closed = True
        self._segments.close()
        if self._owns_store:
            self.store.close()

    @property
    def sealed(self) -> bool:
        """Whether the namespace is sealed, as far as this producer has read the log."""
        return self._loop.sealed

    @property
    def job(self) -> JobSpec | None:
        """The namespace's job of declared shards (``None``: a namespace without one)."""
        return self._committer.view.job

    @property
    def paused(self) -> bool:
        """True while ``append`` waits for the safe boundary (``max_lag``)."""
        return self._loop.paused

    def stats(self) -> ProducerStats:
        """A frozen snapshot of the counters."""
        return self._loop.stats()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        elif not self._closed:
            self.abort()

    def __repr__(self) -> str:
        return f"Producer({self.store.url!r}, producer_id={self.producer_id!r}, epoch={self.epoch})"
