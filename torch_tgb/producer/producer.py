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
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from torch_tgb.errors import FencedError, ObjectNotFound, SchemaMismatch, TGBError, TransientStorageError
from torch_tgb.format import write_tgb
from torch_tgb.layout import Layout, check_schema, schema_fingerprint, schema_of
from torch_tgb.manifest import Committer, DatasetInfo, Manifest, TGBEntry, validate_producer_id
from torch_tgb.producer.dac import ema
from torch_tgb.producer.policies import CommitPolicy, make_policy
from torch_tgb.producer.stats import ProducerStats
from torch_tgb.storage import ObjectStore, ensure_conditional_writes, open_store

__all__ = ["Producer", "ProducerConfig", "object_key"]

log = logging.getLogger(__name__)

_WINDOW_EMA_WEIGHT = 0.2


def object_key(producer_id: str, epoch: int, offset: int) -> str:
    """``data/<producer_id>/e<epoch:06d>-o<offset:012d>-<rand>.tgb``: unique per write attempt."""
    return f"data/{producer_id}/e{epoch:06d}-o{offset:012d}-{secrets.token_hex(4)}.tgb"


@dataclass(frozen=True)
class ProducerConfig:
    """Tuning of a :class:`Producer`.

    ``max_pending``: entries written but not yet committed before ``append``
    blocks. ``lag_poll_s``: how often a producer paused by ``max_lag`` polls
    the watermarks. ``snapshot_every``: K, a snapshot every K versions.
    ``crash_hook``: called with a point name (``after_object_write``,
    ``before_commit``, ``after_version_put``, ``after_commit``); tests use it
    to kill the process at exact points.

    The Reclaimer deletes uncommitted objects older than its ``grace_period``
    (default 1 h), so a write-to-commit delay must stay well below it:
    ``max_commit_delay_s`` makes the committer attempt at once, whatever the
    policy's gap, when the oldest pending entry has waited that long; and
    before committing an entry older than ``verify_after_s`` the committer
    checks that its object still exists, failing loud (``ObjectNotFound``)
    instead of committing a dangling key.
    """

    max_pending: int = 256
    lag_poll_s: float = 0.5
    snapshot_every: int = 16
    crash_hook: Callable[[str], None] | None = None
    max_commit_delay_s: float = 300.0
    verify_after_s: float = 600.0


class Producer:
    """Appends global batches as TGBs to a namespace under a stable ``producer_id``."""

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
    ) -> None:
        self.producer_id = validate_producer_id(producer_id)
        if not isinstance(layout, Layout):
            raise TypeError(f"layout must be a torch_tgb.Layout, got {type(layout).__name__}")
        if max_lag is not None and max_lag < 1:
            raise ValueError(f"max_lag={max_lag} must be >= 1 or None")
        self.layout = layout
        self.max_lag = max_lag
        self.config = config or ProducerConfig()
        self.policy = make_policy(commit_policy)
        self._owns_store = not isinstance(ns, ObjectStore)
        self.store = open_store(ns, storage_options)
        self._metadata = dict(metadata or {})
        self._dataset: DatasetInfo | None = None
        ensure_conditional_writes(self.store)  # one read once the namespace was probed
        self.manifest = Manifest(self.store, snapshot_every=self.config.snapshot_every)
        self._check_dataset_at_start(schema)
        self._committer = Committer(self.manifest, self.producer_id, crash_hook=self.config.crash_hook)
        state = self._committer.start()  # epoch bump: any older incarnation is fenced from here on
        self.epoch = state.epoch
        self.resume_offset = state.next_offset
        self._next_offset = state.next_offset

        self._cond = threading.Condition()
        self._pending: list[TGBEntry] = []
        self._written_at: dict[int, float] = {}  # offset -> when its object was written (monotonic)
        self._error: BaseException | None = None
        self._flushing = 0
        self._seal_requested = False
        self._sealed = False
        self._closing = False
        self._closed = False
        self._stats = ProducerStats(epoch=self.epoch, committed_steps=self._committer.view.num_steps,
                                    committed_offsets=self.resume_offset)
        self._safe_step = 0
        self._thread = threading.Thread(target=self._run, name=f"tgb-commit-{self.producer_id}", daemon=True)
        self._thread.start()

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
        return self.manifest.ensure_dataset(self.layout, schema, self._metadata)

    # --- appending -----------------------------------------------------------

    def append(self, batch: Mapping[str, torch.Tensor], *, offset: int | None = None) -> bool:
        """Write one global batch as offset ``offset`` (default: the next one); queue its commit.

        Returns ``False`` without writing if ``offset`` is below
        :attr:`resume_offset` (already committed by an earlier incarnation).
        An offset other than the next expected one raises ``ValueError``.
        """
        self._raise_if_failed()
        if self._closing:
            raise TGBError(f"{self.store.url}: producer {self.producer_id!r} is closed")
        expected = self._next_offset
        if offset is None:
            offset = expected
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, got {offset!r}")
        if offset < self.resume_offset:
            with self._cond:
                self._stats = replace(self._stats, skipped=self._stats.skipped + 1)
            return False
        if offset != expected:
            raise ValueError(
                f"{self.store.url}: producer {self.producer_id!r} expected offset={expected}, got {offset=} "
                "(offsets are appended consecutively from resume_offset)"
            )
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
        self._wait_for_room()
        tokens = sum(int(batch[k].numel()) for k in self.layout.seq_keys[:1])
        obj = write_tgb(self.store, object_key(self.producer_id, self.epoch, offset), self.layout.cut(batch))
        self._hook("after_object_write")
        entry = TGBEntry(str(obj.key), obj.size, obj.footer_offset, obj.footer_length,
                         self.producer_id, offset, samples, tokens)
        with self._cond:
            self._pending.append(entry)
            self._written_at[offset] = time.monotonic()
            self._next_offset = offset + 1
            s = self._stats
            self._stats = replace(s, appended=s.appended + 1, bytes_written=s.bytes_written + obj.size)
            self._cond.notify_all()
        return True

    def _hook(self, point: str) -> None:
        if self.config.crash_hook is not None:
            self.config.crash_hook(point)

    def _lag(self) -> int:
        return self._committer.view.num_steps + len(self._pending) - self._safe_step

    def _wait_for_room(self) -> None:
        """Block while too many entries are pending, or (max_lag) too far ahead of the safe boundary."""
        started = time.monotonic()
        with self._cond:
            while len(self._pending) >= self.config.max_pending and self._error is None:
                self._cond.wait(0.5)
            self._stats = replace(
                self._stats, paused_for_backpressure_s=self._stats.paused_for_backpressure_s + time.monotonic() - started
            )
        self._raise_if_failed()
        if self.max_lag is None or self._lag() < self.max_lag:
            return
        from torch_tgb.checkpoint.watermarks import safe_boundary

        paused_at = time.monotonic()
        try:
            while True:
                self._safe_step = safe_boundary(self.store)
                if self._lag() < self.max_lag:
                    return
                with self._cond:
                    self._stats = replace(self._stats, paused_for_lag=True)
                    self._cond.wait(self.config.lag_poll_s)
                self._raise_if_failed()
        finally:
            with self._cond:
                paused = time.monotonic() - paused_at
                self._stats = replace(
                    self._stats, paused_for_lag=False, paused_for_lag_s=self._stats.paused_for_lag_s + paused
                )

    # --- committing ------------------------------------------------------------

    def _active_producers(self) -> int:
        horizon = time.time() - self.policy.active_horizon_s
        others = sum(
            1 for pid, s in self._committer.view.producers.items() if pid != self.producer_id and s.committed_at >= horizon
        )
        return others + 1

    def _next_batch(self, last_end: float) -> tuple[list[TGBEntry], bool] | None:
        """Under the lock: wait until the policy says "attempt"; ``None`` when the thread should stop."""
        while True:
            if self._error is not None:
                return None
            n = len(self._pending)
            seal = self._seal_requested and not self._sealed
            if n == 0 and not seal:
                if self._closing:
                    return None
                self._cond.wait()
                continue
            now = time.monotonic()
            since = now - last_end
            wait = self.policy.wait_time(max(n, 1), since)
            if wait is None:
                if not (self._flushing or self._closing):
                    wait = None
                else:
                    wait = max(0.0, self.policy.gap_s - since)
            if n:  # never let the oldest entry wait past max_commit_delay_s (orphan grace)
                overdue = self._written_at.get(self._pending[0].offset, now) + self.config.max_commit_delay_s - now
                wait = max(0.0, overdue) if wait is None else min(wait, max(0.0, overdue))
            if wait is None:
                self._cond.wait()
                continue
            if wait > 0:
                self._cond.wait(wait)
                continue
            limit = self.policy.max_entries
            batch = self._pending[:limit] if limit else list(self._pending)
            return batch, seal and len(batch) == n

    def _run(self) -> None:
        last_end = float("-inf")
        transient = 0
        while True:
            with self._cond:
                chosen = self._next_batch(last_end)
            if chosen is None:
                return
            batch, seal = chosen
            try:
                self._verify_old_objects(batch)
                result = self._committer.attempt(batch, seal=seal)
            except TransientStorageError as e:
                # The store is unwell beyond the retry wrapper's patience: nothing was
                # committed that we do not know of (a landed write is recognised by its
                # token next time), so wait and try again rather than give up.
                transient += 1
                log.warning("%s: commit attempt of %r failed (%s); retrying", self.store.url, self.producer_id, e)
                with self._cond:
                    self._cond.wait(min(5.0, 0.1 * 2 ** min(transient, 6)))
                continue
            except BaseException as e:  # noqa: BLE001 - handed to the caller of append/flush/close
                with self._cond:
                    self._error = e
                    if isinstance(e, FencedError):
                        self._stats = replace(self._stats, fenced=1)
                    self._cond.notify_all()
                if not isinstance(e, TGBError):
                    log.exception("%s: committer of %r failed", self.store.url, self.producer_id)
                return
            transient = 0
            active = self._active_producers()
            if result.wrote:
                self.policy.on_attempt(success=result.committed, window_s=result.window_s, active_producers=active)
            last_end = time.monotonic()
            with self._cond:
                committed = self._committer.next_offset
                self._pending = [e for e in self._pending if e.offset >= committed]
                for offset in [o for o in self._written_at if o < committed]:
                    del self._written_at[offset]
                if seal and result.committed:
                    self._sealed = True
                s = self._stats
                window = ema(s.fragile_window_s or None, result.window_s, _WINDOW_EMA_WEIGHT) if result.wrote else s.fragile_window_s
                self._stats = replace(
                    s,
                    attempts=s.attempts + int(result.wrote),
                    successes=s.successes + int(result.committed and (result.wrote or result.recognised)),
                    conflicts=s.conflicts + int(result.conflict),
                    recognised=s.recognised + int(result.recognised),
                    reclaimed_slots=s.reclaimed_slots + int(result.reclaimed_slot),
                    committed_steps=self._committer.view.num_steps,
                    committed_offsets=committed,
                    fragile_window_s=window,
                    gap_s=self.policy.gap_s,
                    active_producers=active,
                )
                self._cond.notify_all()

    def _verify_old_objects(self, batch: list[TGBEntry]) -> None:
        """Refuse to commit an object that has been waiting so long it may have been reclaimed."""
        cutoff = time.monotonic() - self.config.verify_after_s
        for entry in batch:
            written = self._written_at.get(entry.offset)
            if written is not None and written <= cutoff and not self.store.exists(entry.key):
                raise ObjectNotFound(
                    f"{self.store.url}: producer {self.producer_id!r} offset={entry.offset}: object {entry.key!r} "
                    f"was deleted before its commit (written {time.monotonic() - written:.0f} s ago: is the "
                    "Reclaimer's grace_period shorter than the commit delay?); not committing a dangling key"
                )

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is not None:
            if isinstance(error, TGBError):
                raise error
            raise TGBError(f"{self.store.url}: committer of producer {self.producer_id!r} failed: {error!r}") from error

    def flush(self) -> None:
        """Block until every appended entry is committed (visible to readers)."""
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._pending and self._error is None:
                    self._cond.wait(0.5)
            finally:
                self._flushing -= 1
        self._raise_if_failed()

    def close(self, seal: bool = False) -> None:
        """Commit what is pending, optionally seal the namespace (end of stream), stop. Idempotent."""
        if self._closed:
            if seal and not self._sealed:
                raise TGBError(f"{self.store.url}: producer {self.producer_id!r} is closed; cannot seal now")
            return
        with self._cond:
            self._seal_requested = bool(seal)
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self._closed = True
        if self._owns_store:
            self.store.close()
        self._raise_if_failed()

    def abort(self) -> None:
        """Stop without committing what is pending (those objects stay invisible orphans)."""
        with self._cond:
            if self._error is None:
                self._error = TGBError(f"{self.store.url}: producer {self.producer_id!r} aborted")
            self._cond.notify_all()
        self._thread.join()
        self._closed = True
        if self._owns_store:
            self.store.close()

    @property
    def sealed(self) -> bool:
        return self._sealed

    @property
    def paused(self) -> bool:
        """True while ``append`` waits for the safe boundary (``max_lag``)."""
        return self._stats.paused_for_lag

    def stats(self) -> ProducerStats:
        """A frozen snapshot of the counters."""
        with self._cond:
            return replace(self._stats, pending=len(self._pending), epoch=self.epoch)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        elif not self._closed:
            self.abort()

    def __repr__(self) -> str:
        return f"Producer({self.store.url!r}, producer_id={self.producer_id!r}, epoch={self.epoch})"
