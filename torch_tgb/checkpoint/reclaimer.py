"""The Reclaimer: delete what no live checkpoint can roll back to.

One pass (:meth:`Reclaimer.run_once`), in this order — each step only
removes things that every later state of the namespace no longer needs, so a
pass killed anywhere leaves a readable namespace and the next pass finishes
the job (deletes are idempotent, TGB objects immutable):

0. read the last pass's record (``checkpoint/_reclaim_state.py``): what is
   already clean below the boundary, and when the last sweep ran. A pass
   with no work (the boundary cannot move, nothing is left below it, no
   sweep is due) ends here, after a handful of requests whatever the size
   of the namespace;
1. on a sweep (every ``sweep_interval``): list ``data/`` and the
   namespace's partial writes, then read the head state ``S`` (the order
   matters: every listed object was written before ``S`` was read);
2. free what the *existing* GC boundary already allows, if an earlier pass
   did not finish — objects of steps below it, versions and snapshots below
   it; on a sweep, uncommitted objects that
   ``S`` proves can never be committed (:mod:`torch_tgb.checkpoint._orphans`)
   once older than ``grace_period``, and partial writes (temp files, open
   multipart uploads of writers killed mid-segment) that ``S`` proves
   nobody will finish, by the same rule; objects excisions superseded, once
   no live checkpoint or reader needs them (``_superseded.py``; the objects
   of the excisions in effect are kept). Nothing is written before this, so a
   pass frees space even on a full disk;
3. safe step ``T`` = smallest cursor over live checkpoints (0 when none);
   boundary version ``vb`` = the version holding step ``T`` (the newest
   version when every committed step is behind ``T``); the boundary step is
   ``T`` itself (at most ``stop_step(vb)``): the record of ``vb`` is kept,
   the objects of its steps below ``T`` are not, so a version holding many
   TGBs (DAC batches commits) holds no storage below the safe step;
4. write the snapshot of ``vb``, then advance ``_tgb/gc_boundary`` to
   ``(vb, T)`` — readers and committers now start there. On a disk full to
   the last block these puts fail: the pass then releases the namespace's
   space reserve (``manifest/reserve.py``) and writes them into its room;
5. delete the TGB objects of steps below ``T``, then the log versions below
   ``vb`` (objects first: a version is the only record of which objects it
   named), then snapshots below the boundary. Only the versions between the
   old and the new boundary are read (concurrently), never the live ones:
   a one-TGB object goes with its step, a segment when the entries after its
   last reclaimed TGB show none of it remains (``_segments.py``);
6. drop retired checkpoints: their watermarks, then their markers;
7. write the space reserve again if it is missing (a local namespace), and
   the pass's record.

Every object deleted passes the same rule: named by no version at or above
the boundary, and dead in ``S`` (a committed object below the boundary is
dead: its offset is below its producer's ``next_offset``). An uncommitted
object of a live incarnation at or above its ``next_offset`` is never
deleted, whatever its age or the clocks say.

The boundary never moves back (a pass with fewer live checkpoints only
deletes what earlier passes already allowed). Run one Reclaimer per
namespace: two concurrent passes could interleave their boundary writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from torch_tgb.checkpoint._orphans import Fate, fate_of, partial_is_live
from torch_tgb.checkpoint._reclaim_state import PassRecord
from torch_tgb.checkpoint._segments import still_named
from torch_tgb.checkpoint._superseded import doomed_replacements, doomed_superseded, replacement_keys
from torch_tgb.checkpoint._table_gc import reclaim_table_objects
from torch_tgb.errors import ObjectNotFound, StorageFull
from torch_tgb.manifest.commit import Committer
from torch_tgb.manifest.manifest import Manifest
from torch_tgb.manifest.records import DATA_PREFIX, GCBoundary, ManifestState, TGBEntry
from torch_tgb.manifest.skips import delete_skips_below
from torch_tgb.manifest.reserve import RESERVE_BYTES, create_reserve, release_reserve
from torch_tgb.manifest.watermarks import RETIRED_PREFIX, WATERMARK_PREFIX, Watermark, live_checkpoints, retired_ids
from torch_tgb.storage import ObjectStore, PartialObject, open_store

__all__ = ["DEFAULT_GRACE_PERIOD", "ReclaimReport", "Reclaimer"]

log = logging.getLogger(__name__)

#: dead orphans younger than this are kept (defence in depth: deletion never depends on it)
DEFAULT_GRACE_PERIOD = 3600.0
#: partial writes of metadata (a killed put of a version, snapshot, watermark) younger than this are kept,
#: whatever the grace period: no writer but their own can judge them, and such a put lasts a moment
METADATA_PARTIAL_AGE = 600.0


@dataclass
class _Counts:
    """What one pass deleted so far (the report's numbers), and the boundary it left."""

    objects: int = 0
    versions: int = 0
    snapshots: int = 0
    orphans: int = 0
    live_orphans: int = 0
    partials: int = 0
    live_partials: int = 0
    table_objects: int = 0
    superseded: int = 0
    bytes: int = 0
    released: int = 0
    boundary: GCBoundary | None = None

    def add_objects(self, keys: set[str], count: int, nbytes: int) -> set[str]:
        self.objects += count
        self.bytes += nbytes
        return keys

    def add_orphans(self, count: int, nbytes: int, live: int) -> None:
        self.orphans, self.bytes, self.live_orphans = self.orphans + count, self.bytes + nbytes, live

    def add_partials(self, count: int, nbytes: int, live: int) -> None:
        self.partials, self.bytes, self.live_partials = self.partials + count, self.bytes + nbytes, live


@dataclass(frozen=True)
class ReclaimReport:
    """What one pass found and deleted."""

    safe_step: int  # smallest live cursor (0 when no checkpoint is live)
    boundary_version: int  # GC boundary after the pass
    boundary_step: int
    live_checkpoints: int
    objects: int  # committed TGB objects deleted
    versions: int  # log versions deleted
    snapshots: int
    orphans: int  # uncommitted objects deleted
    checkpoints_dropped: int  # retired checkpoints whose watermark and marker were deleted
    bytes: int  # TGB + orphan bytes deleted
    seconds: float
    live_orphans: int = 0  # uncommitted objects their (live) producer may still commit: kept
    partials: int = 0  # partial writes deleted (temp files, open multipart uploads of killed writers)
    live_partials: int = 0  # partial writes whose (live) producer may still finish them: kept
    reserve_released: bool = False  # the disk was full: the space reserve made room for the snapshot/boundary
    table_objects: int = 0  # producers' buckets and pipeline states below the boundary no one reads (format 2)
    superseded: int = 0  # objects excisions superseded that no live checkpoint or reader needs any more

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Reclaimer:
    """Checkpoint-aligned garbage collection of one namespace.

    An uncommitted object is deleted only when the manifest proves it can
    never be committed (its producer incarnation is fenced, its offset is
    committed, or the namespace is sealed) *and* it is older than
    ``grace_period`` seconds by ``clock`` against the object's mtime. The
    proof alone makes deletion safe; the grace period is defence in depth, so
    a skewed clock cannot cause data loss.
    """

    def __init__(
        self,
        ns_or_store: str | ObjectStore,
        *,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        storage_options: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        sweep_interval: float | None = None,
    ) -> None:
        if grace_period < 0:
            raise ValueError(f"Reclaimer: grace_period={grace_period} must be >= 0")
        if sweep_interval is not None and sweep_interval < 0:
            raise ValueError(f"Reclaimer: sweep_interval={sweep_interval} must be >= 0 or None")
        #: seconds between sweeps for uncommitted objects and partial writes (``None``: a quarter of the grace
        #: period, so a dead orphan goes within 1.25 grace periods); a pass in between reads only its work
        self.sweep_interval = grace_period / 4 if sweep_interval is None else float(sweep_interval)
        self._owns_store = not isinstance(ns_or_store, ObjectStore)
        self.store = open_store(ns_or_store, storage_options)
        self.grace_period = float(grace_period)
        self._clock = clock
        self.manifest = Manifest(self.store)  # kept across passes: its version cache saves re-reads

    def run_once(self) -> ReclaimReport:
        """One idempotent pass; see the module docstring for the order of effects."""
        started = time.monotonic()
        store, manifest = self.store, self.manifest
        record = PassRecord.read(store)
        now = self._clock()
        since = now - record.swept_at
        # a sweep recorded in the future was timed by a clock that ran ahead: it says nothing, so sweep now
        sweep = since >= self.sweep_interval or since < 0
        # data/ is listed before the head is read: every listed object was written
        # before that read, so the head decides whether its incarnation may still commit it.
        data_keys = store.list(DATA_PREFIX) if sweep else []
        partials = store.list_partial() if sweep else []
        live = live_checkpoints(store)
        safe_step = min((m.step for m in live), default=0)
        before = manifest.repair_gc_boundary()  # re-create a deleted generation; drop lower ones landed late
        counts = _Counts()
        if sweep or record.clean_below < before.version or safe_step > before.step:
            self._pass(manifest, record, before, safe_step, (data_keys, partials) if sweep else None, counts, live)
        boundary = counts.boundary or before
        dropped = self._drop_retired()
        create_reserve(store, max(RESERVE_BYTES, counts.released))  # after the deletes made room for it again
        if sweep or boundary.version > record.clean_below:
            PassRecord(boundary.version, now if sweep else record.swept_at).write(store)
        report = ReclaimReport(
            safe_step=safe_step,
            boundary_version=boundary.version,
            boundary_step=boundary.step,
            live_checkpoints=len(live),
            objects=counts.objects,
            versions=counts.versions,
            snapshots=counts.snapshots,
            orphans=counts.orphans,
            checkpoints_dropped=dropped,
            bytes=counts.bytes,
            seconds=time.monotonic() - started,
            live_orphans=counts.live_orphans,
            partials=counts.partials,
            live_partials=counts.live_partials,
            reserve_released=counts.released > 0,
            table_objects=counts.table_objects,
            superseded=counts.superseded,
        )
        log.info("reclaim %s: %s", store.url, report)
        return report

    def _pass(self, manifest: Manifest, record: PassRecord, before: GCBoundary, safe_step: int,
              sweep: tuple[list[str], list[PartialObject]] | None, counts: _Counts, live: list[Watermark]) -> None:
        """The steps of a pass that has work: the existing boundary's leftovers, the sweep, the advance, deletes."""
        head = manifest.head()
        known = record.clean_below if record.clean_below >= before.version else None
        deleted: set[str] = set()
        if known is None:  # an earlier pass did not finish (or nothing is known): finish below the boundary
            # What the existing boundary allows goes first: nothing is written yet, so this
            # frees space even when the disk is too full for the snapshot and boundary puts.
            deleted = counts.add_objects(*self._delete_reclaimed_objects(manifest, before, before, head, None))
            counts.versions += manifest.delete_versions_below(before.version)
            counts.snapshots += self._delete_old_snapshots(before)
        if sweep is not None:
            data_keys, partials = sweep
            kept = self._kept_keys(manifest, before, head) | replacement_keys(manifest, head, before)
            counts.add_orphans(*self._delete_orphans(data_keys, kept | deleted, head))
            counts.add_partials(*self._delete_partials(partials, head))
            self._delete_superseded(manifest, head, live, set(data_keys), counts)
        counts.boundary, counts.released = self._advance_with_reserve(manifest, safe_step, head)
        boundary = counts.boundary
        if boundary != before:
            delete_skips_below(manifest.store, boundary.step)  # markers of reclaimed steps: no reader reads them
            counts.add_objects(*self._delete_reclaimed_objects(manifest, before, boundary, head, known))
            gone = doomed_replacements(manifest, head, boundary)  # excisions' objects of reclaimed steps only
            if gone:
                self.store.delete(sorted(gone))
                counts.objects += len(gone)
            if known is not None:  # every version below ``before`` is gone: delete the range, no LIST
                counts.versions += manifest.delete_version_range(before.version, boundary.version)
            else:
                counts.versions += manifest.delete_versions_below(boundary.version)
            counts.snapshots += self._delete_old_snapshots(boundary)
        if sweep is not None or known is None:  # table objects accumulate between sweeps (a few KB each)
            counts.table_objects += reclaim_table_objects(manifest, boundary, head)

    def run_forever(self, interval: float, *, stop: threading.Event | None = None) -> None:
        """Call :meth:`run_once` every ``interval`` seconds until ``stop`` is set.

        A failed pass is logged and retried at the next interval: reclamation
        is off the critical path, a failure only delays it.
        """
        if interval <= 0:
            raise ValueError(f"run_forever: interval={interval} must be > 0")
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("reclaim pass on %s failed; retrying in %.1fs", self.store.url, interval)
            stop.wait(interval)

    def fence_producer(self, producer_id: str) -> int:
        """Register a new incarnation of ``producer_id`` and commit its ``closed`` mark; the new epoch.

        For a producer that is gone for good: its uncommitted objects stay
        committable (and are kept) until a newer incarnation commits; after
        that commit they are dead and the next pass deletes them. A still-running
        incarnation of that id fails with ``FencedError`` at its next commit;
        a later ``Producer`` with the id resumes at its committed offset.
        The mark is ``closed``: a producer gone for good
        does not hold the end of the stream back (see ``Producer.close``).
        """
        committer = Committer(Manifest(self.store), producer_id)
        state = committer.start()
        while not committer.attempt([], mark="closed").committed:
            pass  # another writer took the slot: rebased, try again
        log.info("%s: fenced producer %r at epoch=%d", self.store.url, producer_id, state.epoch)
        return state.epoch

    def close(self) -> None:
        """Close the store if this Reclaimer opened it (from a URL)."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Reclaimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Reclaimer({self.store.url!r}, grace_period={self.grace_period})"

    # --- steps of a pass -------------------------------------------------------

    def _delete_superseded(self, manifest: Manifest, head: ManifestState, live: list[Watermark], listed: set[str],
                           counts: _Counts) -> None:
        """Delete the objects excisions superseded that nobody can read any more (``_superseded.py``)."""
        in_effect = replacement_keys(manifest, head, GCBoundary())
        doomed = sorted(set(doomed_superseded(manifest, head, live, now=self._clock(), grace_period=self.grace_period,
                                              in_effect=in_effect)) & listed)
        if doomed:
            self.store.delete(doomed)
            counts.superseded += len(doomed)
            log.info("%s: deleted %d object(s) superseded by excisions", self.store.url, len(doomed))

    def _advance_with_reserve(
        self, manifest: Manifest, safe_step: int, head: ManifestState
    ) -> tuple[GCBoundary, int]:
        """:meth:`_advance`; on a full disk, once more after releasing the space reserve. (boundary, bytes released)

        The snapshot and boundary puts are the only writes a pass needs before
        it may delete; they are idempotent, so repeating them after a partial
        failure is safe, and the reserve holds no data.
        """
        try:
            return self._advance(manifest, safe_step, head), 0
        except StorageFull as e:
            released = release_reserve(self.store)
            if not released:
                raise
            log.warning("%s: %s; released the space reserve (%d bytes) to write the snapshot and GC boundary",
                        self.store.url, e, released)
            return self._advance(manifest, safe_step, head), released

    def _advance(self, manifest: Manifest, safe_step: int, head: ManifestState) -> GCBoundary:
        """Move the GC boundary to the version holding ``safe_step`` (never backwards, never past ``head``)."""
        current = manifest.gc_boundary()
        if head.version == 0 or safe_step <= current.step:
            if 0 < safe_step < current.step:  # only a race with record_watermark gets here
                log.warning("%s: a live checkpoint resumes at step=%d, below the GC boundary step=%d: "
                            "it cannot resume", self.store.url, safe_step, current.step)
            return current
        if safe_step >= head.num_steps:
            version = manifest.read_version(head.version)  # every committed step is consumed
        else:
            version = manifest.version_of_step(safe_step, latest=head.version)
        step = min(safe_step, version.stop_step)
        if version.number < current.version or (version.number == current.version and step <= current.step):
            return current
        if version.number != current.version:
            # Snapshot first: advance_gc_boundary refuses a boundary without one.
            manifest.write_snapshot(version.number)
        return manifest.advance_gc_boundary(version.number, step)

    def _delete_reclaimed_objects(
        self, manifest: Manifest, before: GCBoundary, boundary: GCBoundary, head: ManifestState, known: int | None,
    ) -> tuple[set[str], int, int]:
        """Delete objects of steps below the boundary step (and named by no kept entry); (keys, count, bytes).

        ``known``: every version below it is already deleted (the last pass's
        record), so the versions to read are ``known .. boundary.version - 1``,
        read concurrently without a LIST; ``None``: the versions below the
        boundary are listed. Inside the boundary version only the steps this
        pass newly passed are deleted (from ``before.step`` when the version
        did not change), so a later pass neither repeats nor recounts them. A
        one-TGB object goes with its step; a segment only when no entry at or
        above the boundary names it (``_segments.py``). If a pass dies between
        moving the boundary and these deletes, its record still says the
        older ``clean_below``, and the next pass reads those versions again.

        A version below the boundary may also be one a stalled committer wrote
        into an already reclaimed slot (it deletes it on seeing the boundary);
        its objects may be committed on the real chain later, so no key of a
        live incarnation at or above its ``next_offset`` is deleted — no really
        committed object is one.
        """
        if known is None:
            numbers = [int(k.rsplit("/", 1)[1][:20]) for k in manifest.version_keys_below(boundary.version)]
        else:
            numbers = list(range(max(1, known), boundary.version))
        manifest.prefetch(numbers)
        entries: list[TGBEntry] = []
        for number in numbers:
            version = manifest.try_read_version(number)
            if version is not None:  # None: deleted by an earlier, interrupted pass
                entries.extend(version.entries)
        if boundary.version > 0:
            last = manifest.read_version(boundary.version)
            start = before.step if before.version == boundary.version else last.first_step
            entries.extend(last.entries[max(0, start - last.first_step) : max(0, boundary.step - last.first_step)])
        doomed = [e for e in entries if fate_of(head, e.key) is not Fate.LIVE]
        keys = {e.key for e in doomed} - still_named(manifest, boundary, head, doomed)
        if keys:
            self.store.delete(sorted(keys))
        return keys, len(keys), sum(size for key, size in {e.key: e.total_size for e in entries}.items() if key in keys)

    def _delete_old_snapshots(self, boundary: GCBoundary) -> int:
        doomed = self.manifest.snapshot_keys_below(boundary.version)
        if doomed:
            self.store.delete(doomed)
        return len(doomed)

    def _delete_orphans(self, data_keys: list[str], known: set[str], head: ManifestState) -> tuple[int, int, int]:
        """Delete listed objects no kept version names that are dead in ``head``, once past the grace period.

        Returns (deleted, bytes, live orphans kept). Keys no producer writes
        (``Fate.FOREIGN``) go by age alone.
        """
        cutoff = self._clock() - self.grace_period
        doomed: dict[str, int] = {}
        live = 0
        for key in data_keys:
            if key in known:
                continue
            fate = fate_of(head, key)
            if fate is Fate.LIVE:
                live += 1
                continue
            try:
                info = self.store.stat(key)
            except ObjectNotFound:
                continue
            if info.mtime <= cutoff:
                doomed[key] = info.size
        if doomed:
            self.store.delete(sorted(doomed))
        return len(doomed), sum(doomed.values()), live

    def _delete_partials(self, partials: list[PartialObject], head: ManifestState) -> tuple[int, int, int]:
        """Delete the partial writes nobody will finish, once past the grace period; (deleted, bytes, live kept).

        Under ``data/`` their key says which producer incarnation owned them
        (``partial_fate``): a live one's are kept whatever their age. One
        whose key is unknown (written by an older version) goes by age
        alone; metadata puts' (``_tgb/``) by age, at least
        :data:`METADATA_PARTIAL_AGE`.
        """
        now = self._clock()
        doomed: list[PartialObject] = []
        live = 0
        for partial in partials:
            if partial_is_live(head, partial):
                live += 1
                continue
            data = (partial.key or partial.name).startswith(DATA_PREFIX)
            if partial.mtime <= now - (self.grace_period if data else max(self.grace_period, METADATA_PARTIAL_AGE)):
                doomed.append(partial)
        if doomed:
            self.store.delete_partial(doomed)
            log.info("%s: deleted %d partial write(s) of interrupted writers", self.store.url, len(doomed))
        return len(doomed), sum(p.size or 0 for p in doomed), live

    def _kept_keys(self, manifest: Manifest, boundary: GCBoundary, head: ManifestState) -> set[str]:
        """Object keys of steps at or above the boundary step, up to ``head`` (read after listing data/).

        The sweep's cost: every version above the boundary (read concurrently
        from a remote store), once per ``sweep_interval``. Versions after
        ``head`` only name offsets at or above ``head``'s ``next_offset`` of
        live incarnations: objects no pass deletes anyway.
        """
        kept: set[str] = set()
        numbers = list(range(max(1, boundary.version), head.version + 1))
        for lo in range(0, len(numbers), 256):
            manifest.prefetch(numbers[lo : lo + 256])
        for number in numbers:
            version = manifest.read_version(number)
            skip = max(0, boundary.step - version.first_step) if number == boundary.version else 0
            kept.update(e.key for e in version.entries[skip:])
        return kept

    def _drop_retired(self) -> int:
        """Delete retired checkpoints' watermarks, then their markers; returns how many ids were dropped.

        Markers are listed *before* watermarks: an id recorded and retired
        between the two listings then has its watermark deleted with it, never
        a marker deleted under a watermark that would come back to life.
        Dropping them keeps every listing bounded by the live checkpoints, not
        by the length of the run; once dropped, the id may be recorded again
        (``record_watermark`` still refuses a cursor below the GC boundary).
        """
        retired = retired_ids(self.store)
        if not retired:
            return 0
        recorded = {key[len(WATERMARK_PREFIX) : -len(".json")] for key in self.store.list(WATERMARK_PREFIX)
                    if key.endswith(".json")}
        doomed = sorted(retired)
        watermarks = [f"{WATERMARK_PREFIX}{cid}.json" for cid in doomed if cid in recorded]
        if watermarks:
            self.store.delete(watermarks)
        self.store.delete([f"{RETIRED_PREFIX}{cid}" for cid in doomed])  # only after their watermarks are gone
        return len(doomed)
