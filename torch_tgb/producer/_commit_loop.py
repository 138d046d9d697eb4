"""The background half of a ``Producer``: pending entries, commit attempts, backpressure.

A :class:`CommitLoop` owns the entries written but not yet committed and one
thread that commits them through the producer's
:class:`~torch_tgb.manifest.Committer` when the commit policy says so (see
:mod:`torch_tgb.manifest.commit` for the protocol). The caller's thread adds
entries and waits for room: while ``max_pending`` entries wait for their
commit, and, with ``max_lag``, while the namespace is more than ``max_lag``
steps ahead of the checkpoints' safe boundary.

Every mutable field is guarded by one condition variable; the committer
thread's error is handed to the caller of ``append``/``flush``/``close``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torch_tgb.errors import FencedError, ObjectNotFound, TGBError, TransientStorageError
from torch_tgb.manifest import Committer, TGBEntry
from torch_tgb.manifest.records import MAX_VERSION_ENTRIES
from torch_tgb.manifest.watermarks import MAX_LAG_RULE, Retention, live_checkpoints, safe_boundary
from torch_tgb.producer.config import ProducerConfig
from torch_tgb.producer.dac import ema
from torch_tgb.producer.policies import CommitPolicy
from torch_tgb.producer.stats import ProducerStats
from torch_tgb.storage import ObjectStore

__all__ = ["CommitLoop"]

log = logging.getLogger(__name__)

_WINDOW_EMA_WEIGHT = 0.2


class CommitLoop:
    """Commits the entries one :class:`~torch_tgb.producer.Producer` queues, on its own thread.

    The thread starts at construction and ends on :meth:`stop`, :meth:`abort`
    or the first error that is not transient.
    """

    def __init__(
        self,
        *,
        store: ObjectStore,
        producer_id: str,
        committer: Committer,
        policy: CommitPolicy,
        config: ProducerConfig,
        max_lag: int | None,
        epoch: int,
        committed_offsets: int,
        on_commit: Callable[[int], None] | None = None,
    ) -> None:
        self.store = store
        #: called on the committer thread with each version that committed entries of this producer
        self.on_commit = on_commit
        self.producer_id = producer_id
        self.policy = policy
        self.config = config
        self.max_lag = max_lag
        self.epoch = epoch
        self._committer = committer
        self._cond = threading.Condition()
        self._pending: list[TGBEntry] = []
        self._written_at: dict[int, float] = {}  # offset -> when its object was written (monotonic)
        self._states: dict[int, dict[str, Any]] = {}  # offset -> pipeline state after it (Producer.append)
        self._skips: dict[int, dict[str, int]] = {}  # offset -> samples dropped up to it, by reason
        self._error: BaseException | None = None
        self._flushing = 0
        self._mark: str | None = None  # "closed" / "done": committed with the last entries on stop()
        self._marked = False
        self._sealed = False
        self._closing = False
        self._stats = ProducerStats(epoch=epoch, committed_steps=committer.view.num_steps,
                                    committed_offsets=committed_offsets)
        # counted on every append, so kept apart from _stats (a frozen value): folded in by stats()
        self._appended = 0
        self._bytes_written = 0
        self._backpressure_s = 0.0
        self._safe_step = 0
        self._thread = threading.Thread(target=self._run, name=f"tgb-commit-{producer_id}", daemon=True)
        self._thread.start()

    # --- the caller's side -----------------------------------------------------

    @property
    def closing(self) -> bool:
        """True once :meth:`stop` was asked for: no more entries may be added."""
        return self._closing

    @property
    def sealed(self) -> bool:
        """Whether this producer saw the namespace sealed (by its own or another's last commit)."""
        return self._sealed or self._committer.view.sealed

    @property
    def committed_mark(self) -> str | None:
        """The mark asked for by :meth:`stop` once it is committed, else None."""
        return self._mark if self._marked else None

    @property
    def paused(self) -> bool:
        """True while ``append`` waits for the safe boundary (``max_lag``)."""
        return self._stats.paused_for_lag

    def count_skipped(self) -> None:
        """Count an offset that an earlier incarnation already committed."""
        with self._cond:
            self._stats = replace(self._stats, skipped=self._stats.skipped + 1)

    def add(self, entry: TGBEntry, size: int, state: dict[str, Any] | None = None,
            skipped: dict[str, int] | None = None) -> None:
        """Queue the entry of an object just written (``size`` bytes) for its commit.

        ``state``: the pipeline state after this entry, committed with it;
        ``skipped``: the samples dropped up to it, by reason (committed with it too).
        """
        with self._cond:
            self._pending.append(entry)
            self._written_at[entry.offset] = time.monotonic()
            if state is not None:
                self._states[entry.offset] = state
            if skipped is not None:
                self._skips[entry.offset] = skipped
            self._appended += 1
            self._bytes_written += size
            self._cond.notify_all()

    def _lag(self) -> int:
        return self._committer.view.num_steps + len(self._pending) - self._safe_step

    def wait_for_room(self) -> None:
        """Block while too many entries are pending, or (max_lag) too far ahead of the safe boundary."""
        started = time.monotonic()
        with self._cond:
            while len(self._pending) >= self.config.max_pending and self._error is None:
                self._cond.wait(0.5)
            self._backpressure_s = self._backpressure_s + time.monotonic() - started
        self.raise_if_failed()
        if self.max_lag is None or self._lag() < self.max_lag:
            return
        paused_at = time.monotonic()
        warn_every = self.config.lag_warn_s
        warn_at = warn_every
        poll = self.config.lag_poll_s  # doubling up to lag_poll_max_s: a pause lasts until the next checkpoint
        try:
            while True:
                self._safe_step = safe_boundary(self.store)  # a LIST or two and a GET per live checkpoint
                if self._lag() < self.max_lag:
                    return
                waited = time.monotonic() - paused_at
                if warn_at is not None and warn_every is not None and waited >= warn_at:
                    self._warn_paused(waited)
                    warn_at += warn_every
                with self._cond:
                    self._stats = replace(self._stats, paused_for_lag=True)
                    self._cond.wait(poll)
                poll = min(poll * 2, max(self.config.lag_poll_s, self.config.lag_poll_max_s))
                self.raise_if_failed()
        finally:
            with self._cond:
                paused = time.monotonic() - paused_at
                self._stats = replace(
                    self._stats, paused_for_lag=False, paused_for_lag_s=self._stats.paused_for_lag_s + paused
                )

    def _warn_paused(self, waited: float) -> None:
        """A pause for ``max_lag`` is never silent: say how long, where, and what would end it."""
        assert self.max_lag is not None  # only a pause for max_lag warns
        live = live_checkpoints(self.store)
        why = Retention.of(live).shortfall(self.max_lag) or (
            f"the oldest of {len(live)} live checkpoint(s) resumes at step {self._safe_step}; the pause ends when it "
            f"is retired or a newer one replaces it (keep_last); a trainer waiting for data meanwhile cannot reach "
            f"its next checkpoint: then max_lag is too small ({MAX_LAG_RULE})"
            if live else
            "no live checkpoint is recorded in this namespace: the trainer records its cursor with each checkpoint "
            "(DataState, record_watermark), else max_lag never lets go"
        )
        log.warning(
            "%s: producer %r paused %.0f s by max_lag=%d: %d steps committed or pending, %d ahead of the safe "
            "boundary; %s", self.store.url, self.producer_id, waited, self.max_lag,
            self._committer.view.num_steps + len(self._pending), self._lag(), why,
        )

    def raise_if_failed(self) -> None:
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
        self.raise_if_failed()

    def stop(self, mark: str) -> None:
        """Commit what is pending with this producer's ``mark`` ("closed" or "done"), wait for the thread."""
        with self._cond:
            self._mark = mark
            self._closing = True
            self._cond.notify_all()
        self._thread.join()

    def abort(self) -> None:
        """Stop without committing what is pending; wait for the thread to end."""
        with self._cond:
            if self._error is None:
                self._error = TGBError(f"{self.store.url}: producer {self.producer_id!r} aborted")
            self._cond.notify_all()
        self._thread.join()

    def stats(self) -> ProducerStats:
        """A frozen snapshot of the counters."""
        with self._cond:
            return replace(self._stats, pending=len(self._pending), epoch=self.epoch, appended=self._appended,
                           bytes_written=self._bytes_written, paused_for_backpressure_s=self._backpressure_s)

    # --- the committer thread --------------------------------------------------

    def _active_producers(self) -> int:
        """Producers committing now, this one included (DAC's N).

        Format 2: from the rate at which others' versions arrive, ``N - 1 =
        rate * (W + g)`` (DAC's own model of one cycle), at most the producers
        the table counts open; no bucket is read. Format 1: the producers of
        the folded view that committed within the policy's horizon.
        """
        view = self._committer.view
        if view.table is not None:
            rate = self._committer.others_commit_rate()
            if rate is None:  # no sample yet: every producer the table counts open may commit
                return max(1, view.table.open)
            cycle = (self._stats.fragile_window_s or 0.0) + self.policy.gap_s
            return max(1, min(view.table.open, round(rate * cycle) + 1))
        horizon = time.time() - self.policy.active_horizon_s
        others = sum(1 for pid, s in view.producers.items() if pid != self.producer_id and s.committed_at >= horizon)
        return others + 1

    def _next_batch(self, last_end: float) -> tuple[list[TGBEntry], str | None] | None:
        """Under the lock: wait until the policy says "attempt"; ``None`` when the thread should stop."""
        while True:
            if self._error is not None:
                return None
            n = len(self._pending)
            mark = None if self._marked else self._mark
            if n == 0 and mark is None:
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
            limit = min(self.policy.max_entries or MAX_VERSION_ENTRIES, MAX_VERSION_ENTRIES)
            batch = self._pending[:limit]
            return batch, (mark if len(batch) == n else None)

    def _run(self) -> None:
        last_end = float("-inf")
        transient = 0
        while True:
            with self._cond:
                chosen = self._next_batch(last_end)
            if chosen is None:
                return
            batch, mark = chosen
            with self._cond:
                state = self._states.get(batch[-1].offset) if batch else None
                skipped = self._skips.get(batch[-1].offset) if batch else None
            try:
                self._verify_old_objects(batch)
                result = self._committer.attempt(batch, state=state, mark=mark, skipped=skipped)
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
            if result.committed and batch and (result.wrote or result.recognised) and self.on_commit is not None:
                self.on_commit(result.version)
            active = self._active_producers()
            if result.wrote:
                self.policy.on_attempt(success=result.committed, window_s=result.window_s, active_producers=active)
            last_end = time.monotonic()
            with self._cond:
                committed = self._committer.next_offset
                self._pending = [e for e in self._pending if e.offset >= committed]
                for offset in [o for o in self._written_at if o < committed]:
                    del self._written_at[offset]
                    self._states.pop(offset, None)
                    self._skips.pop(offset, None)
                if mark is not None and result.committed:
                    self._marked = True
                self._sealed = self._committer.view.sealed
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
        """Refuse to commit an object that has vanished while it waited (defence in depth).

        The Reclaimer never deletes an object this incarnation may still commit
        (docs/protocol.md, *Reclaiming uncommitted objects*); this check only
        catches deletions from outside the protocol, for objects that waited
        longer than ``verify_after_s``.
        """
        cutoff = time.monotonic() - self.config.verify_after_s
        for entry in batch:
            written = self._written_at.get(entry.offset)
            if written is not None and written <= cutoff and not self.store.exists(entry.key):
                raise ObjectNotFound(
                    f"{self.store.url}: producer {self.producer_id!r} offset={entry.offset}: object {entry.key!r} "
                    f"was deleted before its commit (written {time.monotonic() - written:.0f} s ago; the Reclaimer "
                    "keeps objects a live producer may still commit: was it deleted behind the namespace's back?); "
                    "not committing a dangling key"
                )
