"""The commit protocol: read-before-write, rebase, tokens, GC boundary, fencing.

One :class:`Committer` per producer incarnation. It keeps a *view*: the full
state at the newest version it has read. An attempt:

1. **Refresh** (read-before-write): find the newest version (probing from
   the view, or from the hint when the view is old) and read it and our own
   bucket of its producers' table (format 2, docs/protocol.md): the newest
   version names every producer's state, so the versions in between are
   never read -- O(1) round trips however many producers committed meanwhile.
   Our own state there carrying our commit token means our write landed and
   its acknowledgement was lost: success. A newer epoch for our
   ``producer_id`` means a newer incarnation exists: :class:`FencedError`,
   and we never write again. (On a namespace whose newest version is still
   format 1, the versions are read and folded one after another as before;
   our first commit writes the whole table.)
2. **Rebase**: drop pending entries below our committed ``next_offset``;
   the rest go on top of the view (``first_step`` = steps committed so far).
   Write our pipeline state (when large, as its own object) and our bucket
   with our new state, then
3. **Create** ``_tgb/log/<view+1>`` with ``put_if_absent``, naming the new bucket. ``True``: go to
   4. ``False`` or :class:`AmbiguousWriteError`: read the version back; our
   token means it landed (4); another token is a conflict (the next attempt
   rebases on it); missing after an ambiguous reply means it did not land
   (retry the same bytes into the same slot).
4. **GC boundary**: re-read it (the highest generation under ``_tgb/gc_boundary/``). A created version
   strictly below the boundary either was reclaimed right after we created
   it (the boundary's snapshot includes our commit: success) or sits in a slot
   reclaimed before we wrote it (a stalled writer whose base was deleted; the
   snapshot does not include it): the commit failed; delete that object,
   restart the view from the boundary's snapshot and retry. The boundary
   version itself is never deleted, so creating it means it is ours.

Registration (``start``) writes no version: it creates the object of the
incarnation's new epoch (``_epochs.py``), and every create above checks first
that no newer epoch is registered; the first commit of an incarnation puts
its epoch in the log (docs/protocol.md, *Registering*).

End of stream: each commit carries the producer's mark (``open``; ``closed``
when it closes, ``done`` when it closes for good). The last ``done`` mark
seals the namespace, decided on the rebased view of each attempt; a
producer outside the namespace's job, or a shard already done, is refused
at start, before it writes anything (the rules: ``_rules.py``). A producer
that starts (or a zombie that commits) after the seal gets :class:`NamespaceSealed`.

The token belongs to an *attempt group*: it is kept across retries until an
attempt is known to have landed, so a write acknowledged late (or never) is
still recognised when read back later.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch_tgb.errors import FencedError, ManifestError, NamespaceSealed, StorageError
from torch_tgb.manifest._create import create_version, encode_candidate
from torch_tgb.manifest._epochs import claim_epoch, newer_claimed, starting
from torch_tgb.manifest._rate import VersionRate
from torch_tgb.manifest._rules import check_joinable, done_seals, holds_commit, marks, unfinished, unfinished_text
from torch_tgb.manifest._state import fold
from torch_tgb.manifest._table import bucket_of
from torch_tgb.manifest._table_writes import TableWriter
from torch_tgb.manifest.jobs import SEALER_ID, JobSpec
from torch_tgb.manifest.manifest import Manifest
from torch_tgb.manifest.records import (
    ManifestState,
    ProducerState,
    TGBEntry,
    Version,
    validate_producer_id,
)

from torch_tgb.storage import ObjectStore

__all__ = ["SEALER_ID", "AttemptResult", "Committer", "unfinished"]

log = logging.getLogger(__name__)

#: crash points a test hook can act on (see ``Committer(crash_hook=...)``)
CRASH_POINTS = ("before_commit", "after_version_put", "after_commit")


@dataclass(frozen=True)
class AttemptResult:
    """What one commit attempt did."""

    committed: bool  # every entry handed in is now in the log
    conflict: bool  # another writer took the slot: rebase and retry
    version: int  # the version written or tried
    window_s: float  # fragile window: newest version read -> write attempt finished
    recognised: bool = False  # success learnt by reading our token back (lost acknowledgement)
    reclaimed_slot: bool = False  # created below the GC boundary: counted as failed
    wrote: bool = True  # False if nothing had to be written


class Committer:
    """Commits one producer's entries to the log. Not thread-safe: one committer thread."""

    def __init__(
        self,
        manifest: Manifest,
        producer_id: str,
        *,
        job: JobSpec | None = None,
        crash_hook: Callable[[str], None] | None = None,
        max_ambiguous_retries: int = 8,
    ) -> None:
        self.manifest = manifest
        self.producer_id = validate_producer_id(producer_id)
        self._writes = TableWriter(manifest.store, self.producer_id)
        #: the job this producer belongs to: declared by its start if the namespace has none yet
        self.job = job
        self.epoch = 0  # set by start(); 0 = no epoch of ours committed yet
        self._view: ManifestState | None = None
        self._bucket: dict[str, ProducerState] | None = None  # our bucket of the view's table (format 2)
        self._bucket_ref = ""  # the reference of that bucket's object ("": not read from one)
        self._taken = 0  # a slot found taken by another writer: the newest version is at least this
        self._token = uuid.uuid4().hex
        self._previous_token = ""  # the token of our last group known to have landed (ours when the log holds it)
        self._registered: ProducerState | None = None  # our state in the log when we registered (start())
        self._landed: int | None = None
        self._fenced: FencedError | None = None
        self._crash_hook = crash_hook
        self._max_ambiguous_retries = max_ambiguous_retries
        self._rate = VersionRate()
        self._next_bucket: dict[str, ProducerState] | None = None  # our bucket as the candidate in flight wrote it
        self._next_bucket_ref = ""

    @property
    def store(self) -> ObjectStore:
        """Where versions, buckets and states are written (a test may swap in a faulty one)."""
        return self._writes.store

    @store.setter
    def store(self, store: ObjectStore) -> None:
        self._writes.store = store

    # --- view -------------------------------------------------------------

    @property
    def view(self) -> ManifestState:
        if self._view is None:
            raise RuntimeError("Committer.start() was not called")
        return self._view

    @property
    def state(self) -> ProducerState | None:
        """This producer's committed state in the view."""
        if self._bucket is not None:
            return self._bucket.get(self.producer_id)
        return self.view.producers.get(self.producer_id)

    @property
    def next_offset(self) -> int:
        state = self.state
        return 0 if state is None else state.next_offset

    @property
    def resume_state(self) -> Mapping[str, Any] | None:
        """The pipeline state committed with our ``next_offset`` (see ``ProducerState.state``).

        A large one lives in its own object, read here (only this producer reads it).
        """
        return self.manifest.pipeline_state(self.producer_id, self.state)

    def others_commit_rate(self) -> float | None:
        """Versions per second committed by other producers, as seen by this committer's refreshes (EMA);
        ``None`` before two refreshes found new versions."""
        return self._rate.rate

    def _hook(self, point: str) -> None:
        if self._crash_hook is not None:
            self._crash_hook(point)

    def refresh(self) -> float:
        """Bring the view to the newest version (read-before-write); returns when the newest was known."""
        view = self.view
        if view.table is None:
            return self._refresh_folding()
        taken, self._taken = self._taken, 0
        read_at, newest = self.manifest.newest_for_commit(view.version, expected=self._expected(), at_least=taken)
        self._rate.saw(newest - view.version, read_at)  # versions since our view: all others'
        if newest == view.version:
            return read_at
        version = self.manifest.try_read_version(newest)
        if version is None:  # the hint named a version that is not there: probe from our own view
            read_at, newest = self.manifest.newest_for_commit(view.version)
            version = self.manifest.read_version(newest)
        if version.table is None:
            raise ManifestError(f"{self.manifest.where}manifest version={newest} is format 1 after format-2 "
                                f"version={view.version}")
        self._adopt(self.manifest.state_of(version))
        return read_at

    def _refresh_folding(self) -> float:
        """Format 1: read every version after the view, one after another, folding each."""
        view = self.view
        while True:
            read_at = time.monotonic()
            version = self.manifest.try_read_version(view.version + 1)
            if version is None:
                return read_at
            view = fold(view, version, where=self.manifest.where)
            if version.token == self._token:
                self._landed = version.number
            self._view = view
            self._bucket = None
            if view.table is not None:  # a format-2 version: it names everything; jump to the newest
                self._adopt(self.manifest.with_loader(view))  # (our bucket read through the store: then fencing)
                return self.refresh()
            self._check_fenced(version.number)

    def _expected(self) -> int | None:
        """How many versions others most likely wrote since our view (from their rate); ``None``: no rate yet."""
        rate = self._rate.rate
        return None if rate is None else round(rate * self._rate.since(time.monotonic()))

    def _adopt(self, view: ManifestState) -> None:
        """Take ``view`` (a format-2 state): read our bucket, recognise a landed write, check fencing."""
        table = view.table
        assert table is not None
        index = bucket_of(self.producer_id, len(table.buckets))
        ref = table.buckets[index]
        if self._bucket is None or not ref or ref != self._bucket_ref:  # unchanged since we read or wrote it
            self._bucket = dict(view.producers.bucket(index))  # type: ignore[attr-defined]
            self._bucket_ref = ref
        self._view = view
        mine = self._bucket.get(self.producer_id)
        if mine is not None and mine.token == self._token:
            self._landed = view.version if mine.at is None else mine.at
        self._check_fenced(view.version)

    def _check_fenced(self, number: int) -> None:
        """Raise :class:`FencedError` if the view holds a newer epoch for our producer_id, or our epoch
        written by someone else (an incarnation of older code that bumped to our epoch in the log)."""
        mine = self.state
        if not self.epoch or mine is None:
            return
        if mine.epoch > self.epoch:
            self._fence(f"manifest version={number} holds epoch={mine.epoch} (a newer incarnation started)")
        if mine.epoch == self.epoch and mine.token is not None and mine.token not in (self._token,
                                                                                      self._previous_token):
            self._fence(f"manifest version={number} holds epoch={mine.epoch} written by another incarnation")

    def _fence(self, why: str) -> None:
        self._fenced = FencedError(f"{self.manifest.where}producer_id={self.producer_id!r} epoch={self.epoch} "
                                   f"is fenced: {why}")
        raise self._fenced

    @property
    def _unlogged(self) -> bool:
        """Whether our epoch is not in the log yet (registered, nothing of this incarnation committed)."""
        mine = self.state
        return mine is None or mine.epoch < self.epoch

    def _check_startable(self) -> None:
        """Refuse to start (or to make the first commit) where the view does not let this producer join."""
        check_joinable(self.view, self.producer_id, self.job, where=self.manifest.where)
        if self.view.sealed:
            raise NamespaceSealed(
                f"{self.manifest.where}namespace is sealed at version={self.view.version} (its stream has "
                f"ended; producers: {marks(self.view)}): producer {self.producer_id!r} cannot start; "
                "write to a new namespace"
            )

    def _starting_elsewhere(self) -> bool:
        """Without declared shards: whether another producer registered but has not committed yet (it holds
        the seal back, as an open one does)."""
        return bool(starting(self.store, self.view, but=self.producer_id))

    def _note_overtaken(self) -> None:
        """Warn (once) when an older incarnation committed after our registration (docs/protocol.md,
        *Registering*: at most one version, whose epoch check preceded our claim; rebase drops our own
        entries for the offsets it committed)."""
        mine, before = self.state, self._registered
        if mine is None or (before is not None and (mine.next_offset, mine.token) == (before.next_offset,
                                                                                      before.token)):
            return
        log.warning("%sproducer %r epoch=%d: epoch=%d committed up to offset %d after this incarnation registered "
                    "(from offset %d); its entries stand, ours below offset %d are dropped",
                    self.manifest.where, self.producer_id, self.epoch, mine.epoch, mine.next_offset,
                    0 if before is None else before.next_offset, mine.next_offset)
        self._registered = mine

    def _reset_view(self) -> None:
        # The view jumps (from the boundary's snapshot): a newer epoch may be inside the
        # jump rather than in a version we read one by one, so check for it here too.
        view = self.manifest.head()
        if view.table is not None:
            self._adopt(view)
            return
        self._view = view
        self._bucket = None
        self._check_fenced(view.version)

    def _in_canonical_chain(self, candidate: Version, boundary_version: int) -> bool:
        """Whether the state at the boundary already holds what ``candidate`` commits for us."""
        for _ in range(4):
            snapshot = self.manifest.read_snapshot(boundary_version)
            if snapshot is None:  # moved on again and that snapshot was deleted: use the newer one
                boundary_version = self.manifest.gc_boundary().version
                continue
            return holds_commit(snapshot, candidate, self.producer_id)
        raise ManifestError(
            f"{self.manifest.where}no snapshot found for GC boundary version={boundary_version} after retries"
        )

    # --- start: registration ----------------------------------------------------

    def start(self) -> ProducerState:
        """Register a new incarnation of our producer_id; returns our state to resume from, with our new epoch.

        Reads the newest version (O(1) round trips) and creates the
        registration object of the next epoch (``_epochs.py``); no version is
        written, so registrations of different producers never contend. From
        then on an older incarnation stops at its next attempt (it checks for
        a newer registration before each create: :class:`FencedError`), and
        our first commit puts the new epoch in the log, which fences it there
        for good. In a namespace of declared shards, a producer outside the
        job raises :class:`JobMismatch` and a shard already done
        :class:`ShardComplete` (nothing is written: a finished shard's rerun
        is a no-op); the first commit of the first producer of a fresh
        namespace declares ``self.job``.
        """
        self._reset_view()
        self.refresh()
        self._check_startable()
        current = self.state
        self.epoch = claim_epoch(self.store, self.producer_id, 0 if current is None else current.epoch, self._token,
                                 where=self.manifest.where)
        self._registered = current
        self._new_group()
        while self.job is not None and self.view.job is None:  # the first producer of a fresh namespace
            if self._declare().committed:  # declares the job in the log now: so it refuses an outsider's start
                break
            self.refresh()  # another producer's version took the slot: most likely its declaration
            self._check_startable()
        if self._landed is not None:  # our declaration, recognised by its token
            self._new_group()
        if current is None:
            return ProducerState(self.epoch, 0, time.time())
        return replace(current, epoch=self.epoch)

    def _check_registrations(self) -> None:
        """Fence ourselves if a newer incarnation registered (one existence check; before every create, so an
        older incarnation lands at most the one version whose check preceded the newer one's claim)."""
        if newer_claimed(self.store, self.producer_id, self.epoch):
            self._fence(f"epoch={self.epoch + 1} registered (a newer incarnation started)")

    def _declare(self) -> AttemptResult:
        """Commit our new epoch with the job declaration (no entries): the one version a start may write."""
        self._check_registrations()
        current, now = self.state, time.time()
        mine = ProducerState(self.epoch, self.next_offset, now, status="open",
                             skipped=None if current is None else current.skipped)
        candidate = self._candidate((), mine, pipeline=current, sealed=False, now=now, declares=self.job)
        return self._write(candidate, read_at=time.monotonic())

    def _new_group(self) -> None:
        self._previous_token, self._token = self._token, uuid.uuid4().hex
        self._landed = None

    # --- commit --------------------------------------------------------------

    def attempt(
        self,
        entries: Sequence[TGBEntry],
        *,
        seal: bool = False,
        state: Mapping[str, Any] | None = None,
        mark: str | None = None,
        refuse_open: bool = False,
        skipped: Mapping[str, int] | None = None,
    ) -> AttemptResult:
        """One commit attempt of ``entries`` (consecutive offsets of this producer).

        Entries already committed (offset below our ``next_offset``) are
        dropped; the rest are appended on top of the newest version.
        ``state``: the pipeline state after the last of ``entries``, committed
        with it (seal-only attempts keep the committed state).
        ``mark`` ("closed" or "done") records this producer's end in the same
        version; ``"done"`` seals the namespace when it leaves every declared
        shard done (a namespace of declared shards) or, without declared
        shards, when no other producer is still open. ``seal=True`` seals
        unconditionally (one-producer writers, the operator's sealer); with
        ``refuse_open`` it raises :class:`ManifestError` instead while another
        producer is unfinished (checked on the rebased view). ``skipped``: the
        samples the pipeline dropped up to the last of ``entries``, by reason
        (recorded with this producer; an attempt without it keeps the committed counts).
        """
        if self._fenced is not None:
            raise self._fenced
        if not self.epoch:
            raise RuntimeError("Committer.start() was not called")
        self._check_registrations()  # before the refresh: outside the fragile window
        read_at = self.refresh()
        if self._unlogged:  # our first commit: the view may have moved since start()
            check_joinable(self.view, self.producer_id, self.job, where=self.manifest.where)
            self._note_overtaken()
        if self._landed is not None:
            landed = self._landed
            self._new_group()
            done = not entries or entries[-1].offset < self.next_offset
            return AttemptResult(done, False, landed, 0.0, recognised=True, wrote=False)
        todo = [e for e in entries if e.offset >= self.next_offset]
        if todo and todo[0].offset != self.next_offset:
            raise ValueError(
                f"{self.manifest.where}producer {self.producer_id!r}: entries start at offset={todo[0].offset}, "
                f"but the log's next_offset is {self.next_offset}"
            )
        if self.view.sealed:
            if not todo:
                return AttemptResult(True, False, self.view.version, 0.0, wrote=False)
            raise NamespaceSealed(
                f"{self.manifest.where}namespace is sealed at version={self.view.version} "
                f"(producers: {marks(self.view)}): producer {self.producer_id!r} cannot commit offsets "
                f"from {todo[0].offset}"
            )
        status = mark or "open"
        current = self.state
        if mark is not None and mark not in ("closed", "done"):
            raise ValueError(f"mark must be 'closed', 'done' or None, got {mark!r}")
        if not todo and not seal and (mark is None or (current is not None and current.status == status
                                                          and not self._unlogged)):
            return AttemptResult(True, False, self.view.version, 0.0, wrote=False)
        if refuse_open:
            still = [pid for pid in unfinished(self.view) if pid != self.producer_id]
            still += starting(self.store, self.view, but=self.producer_id)  # registered, nothing committed yet
            if still:
                raise ManifestError(f"{self.manifest.where}cannot seal at version={self.view.version}: "
                                    f"{unfinished_text(self.view, still)}")
        if mark == "done":
            seal = seal or (done_seals(self.view, self.producer_id) and not self._starting_elsewhere())
        now = time.time()
        next_offset = todo[-1].offset + 1 if todo else self.next_offset
        kept = None if current is None else current.skipped
        mine = ProducerState(self.epoch, next_offset, now, status=status,
                             skipped=dict(skipped) if todo and skipped is not None else kept)
        pipeline: ProducerState | Mapping[str, Any] | None = state if todo else current
        candidate = self._candidate(tuple(todo), mine, pipeline=pipeline, sealed=seal, now=now,
                                    declares=self.job if self.view.job is None else None)
        return self._write(candidate, read_at=read_at)

    def _candidate(
        self, entries: tuple[TGBEntry, ...], mine: ProducerState, *, pipeline: ProducerState | Mapping[str, Any] | None,
        sealed: bool, now: float, declares: JobSpec | None = None,
    ) -> Version:
        """The version that would follow the view: format 2, our bucket rewritten with ``mine``.

        ``pipeline``: the pipeline state to commit with ``mine`` (a mapping),
        or a committed state whose pipeline state is kept as it is. On a
        format-1 view (the namespace's first commit by this code) every
        bucket is written: the whole table.
        """
        number = self.view.version + 1
        job = declares if self.view.job is None else self.view.job
        inline, ref = self._writes.pipeline_state(pipeline, number, self.state)
        full = replace(mine, state=inline, state_ref=ref, token=self._token, at=number)
        table = self.view.table
        if table is None:  # migrate: the whole table from the folded view (format 1)
            table, self._next_bucket = self._writes.table({**self.view.producers, self.producer_id: full}, number,
                                                          self._token, job)
        else:
            index = bucket_of(self.producer_id, len(table.buckets))
            bucket = dict(self._bucket or {})
            before = bucket.get(self.producer_id)
            bucket[self.producer_id] = full
            written = self._writes.bucket(index, len(table.buckets), bucket, number, self._token)
            self._next_bucket, self._next_bucket_ref = bucket, written
            table = table.with_bucket(index, written, before=None if before is None else before.status,
                                      after=full.status, declared=job is not None and self.producer_id in job)
        return Version(number, self._token, self.view.num_steps, entries, {self.producer_id: full.delta}, sealed,
                       now, job, table, self.view.replaced)  # the replacements in effect, carried unchanged

    def _write(self, candidate: Version, *, read_at: float) -> AttemptResult:
        number = candidate.number
        key = self.manifest.slot_key(number)
        data = encode_candidate(self.view, candidate, where=self.manifest.where)
        self._hook("before_commit")
        created, recognised = create_version(self.store, self.manifest, number, data, self._token,
                                             retries=self._max_ambiguous_retries)
        window = time.monotonic() - read_at
        if not created:
            self._taken = number  # the next refresh probes from this slot: it exists
            return AttemptResult(False, True, number, window)
        self._hook("after_version_put")
        boundary = self.manifest.gc_boundary()
        if number < boundary.version:
            # Below the boundary: either the Reclaimer moved the boundary past our
            # (legitimate) version right after we created it, or we wrote into a
            # slot it had already deleted (we were stalled at an old view), and
            # our version extends a chain nobody reads. The boundary's snapshot,
            # built from the real chain, tells which.
            if self._in_canonical_chain(candidate, boundary.version):
                self._reset_view()
                self._new_group()
                self._hook("after_commit")
                return AttemptResult(True, False, number, window, recognised=recognised)
            log.warning(
                "%s: manifest version=%d was created in a slot reclaimed below GC boundary version=%d; rebasing",
                self.store.url, number, boundary.version,
            )
            self.store.delete(key)  # nobody reads below the boundary; the real version N is gone
            self.manifest.forget(number)
            self._reset_view()
            return AttemptResult(False, True, number, window, reclaimed_slot=True)
        # number == boundary.version is ours and kept (the boundary version itself is never deleted)
        self._view = self.manifest.with_loader(fold(self.view, candidate, where=self.manifest.where))
        self._bucket, self._bucket_ref = self._next_bucket, self._next_bucket_ref
        self.manifest.remember(candidate)
        self._new_group()
        self._hook("after_commit")
        self.manifest.after_commit(self._view, others_commit=bool(self._rate.rate))
        return AttemptResult(True, False, number, window, recognised=recognised)
