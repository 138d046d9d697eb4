"""Writing snapshots and moving the GC boundary: what lets old log versions go.

The committer writes a snapshot every K versions; the Reclaimer writes the
snapshot of its boundary version B, advances the GC boundary to (B, step),
and only then deletes the versions below B (B itself is kept) and the
objects of steps below ``step`` (which may lie inside B).
"""

from __future__ import annotations

import logging

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._json import dump_json
from torch_tgb.manifest._log import LogReader
from torch_tgb.manifest.keys import GC_BOUNDARY_KEY, LOG_PREFIX, SNAPSHOT_HINT_KEY, boundary_key, number_of, snapshot_key
from torch_tgb.manifest.records import FORMAT, GCBoundary, ManifestState

__all__ = ["LogMaintenance"]

log = logging.getLogger(__name__)


class LogMaintenance(LogReader):
    """Snapshot writes and GC-boundary maintenance of :class:`~torch_tgb.manifest.Manifest`."""

    def write_snapshot(self, number: int, state: ManifestState | None = None) -> ManifestState:
        """Write the snapshot of version ``number`` (idempotent) and move the hint forward.

        ``state`` may be passed by a caller that already holds it (the
        committer); otherwise it is computed from the log. Snapshots are only
        written for versions that exist.
        """
        if state is None:
            if number > self.latest_version():
                raise ManifestError(f"{self.where}cannot snapshot version={number}: not committed")
            state = self.state_at(number)
        if state.version != number:
            raise ValueError(f"snapshot of version={number} given the state of version={state.version}")
        self.store.put(snapshot_key(number), state.encode())
        if self._read_hint() < number:
            # Racing hint writers may move it back a little: it is only a starting point.
            self.store.put(SNAPSHOT_HINT_KEY, dump_json({"format": FORMAT, "version": number}))
        return state

    # --- GC boundary -------------------------------------------------------

    def advance_gc_boundary(self, version: int, step: int) -> GCBoundary:
        """Allow versions below ``version`` and the objects of steps below ``step`` to be deleted.

        Preconditions, checked: the snapshot of ``version`` exists (write it
        first with :meth:`write_snapshot`), ``step`` is at most that version's
        ``stop_step`` (the version record itself stays, so the steps from
        ``step`` on stay readable even when ``step`` lies inside it), and the
        boundary only moves forward. Call this *before* deleting anything:
        producers re-read it after every create to detect a commit into a
        reclaimed slot.
        """
        current = self.gc_boundary()
        if (version, step) == (current.version, current.step):
            return current
        if version < current.version or step < current.step:
            raise ManifestError(
                f"{self.where}GC boundary moves only forward: at version={current.version}, step={current.step}, "
                f"asked for version={version}, step={step}"
            )
        if self.read_snapshot(version) is None:
            raise ManifestError(f"{self.where}advance_gc_boundary({version=}): write_snapshot({version}) first")
        stop_step = self.read_version(version).stop_step
        if step > stop_step:
            raise ManifestError(
                f"{self.where}advance_gc_boundary({version=}, {step=}): version {version} ends before "
                f"step={stop_step}; a later version must be the boundary; pass step <= {stop_step}"
            )
        boundary = GCBoundary(version, step)
        self._put_gc_boundary(boundary)
        return boundary

    def repair_gc_boundary(self) -> GCBoundary:
        """The boundary, after re-creating the highest one seen if storage no longer lists it.

        Generations are immutable, so a late write cannot lower the stored
        boundary; only a deleted generation (by hand, or a store whose LIST
        lags) can. Lower generations re-created by late writes are dropped.
        The Reclaimer calls this first in every pass, before it deletes
        anything.
        """
        generations = self._boundary_generations()
        stored = self.stored_gc_boundary(generations)
        current = self._at_least_seen(stored)
        if stored != current:
            log.warning("%sGC boundary on storage is below version=%d, step=%d; writing that generation again",
                        self.where, current.version, current.step)
            self._put_gc_boundary(current)
        else:
            self._drop_lower_generations(current, generations, legacy=False)
        return current

    def _put_gc_boundary(self, boundary: GCBoundary) -> None:
        """Create ``boundary``'s generation, check that storage lists it, then drop the lower ones.

        The generation is created with ``put_if_absent`` under a key that is
        its value, so every write of it, a delayed retry included, writes the
        same thing, and a late write of an older boundary only re-creates a
        lower generation: the highest one, which readers take, never goes back.
        """
        self._saw_gc_boundary(boundary)
        self.store.put_if_absent(boundary_key(boundary.version, boundary.step), dump_json(boundary.to_json()))
        generations = self._boundary_generations()
        stored = self.stored_gc_boundary(generations)
        if (stored.version, stored.step) < (boundary.version, boundary.step):
            raise ManifestError(
                f"{self.where}GC boundary version={boundary.version}, step={boundary.step} was created but storage "
                f"lists version={stored.version}, step={stored.step}: nothing is deleted on its strength"
            )
        self._drop_lower_generations(stored, generations, legacy=True)

    def _drop_lower_generations(self, current: GCBoundary, generations: list[tuple[int, int]], *, legacy: bool) -> None:
        """Delete the generations below ``current`` (which ``generations``, a fresh listing, holds).

        ``legacy``: also the pre-generation ``_tgb/gc_boundary.json`` (an
        advance does it; a pass with nothing lower to drop makes no request).
        Only tidiness: readers take the highest generation, so one re-created
        late by a delayed write is harmless, and goes at the next pass.
        """
        top = (current.version, current.step)
        if top not in generations:  # a boundary only in the pre-generation object stays there until an advance
            return
        lower = [boundary_key(*g) for g in generations if g < top]
        if lower or legacy:
            self.store.delete([GC_BOUNDARY_KEY, *lower] if legacy else lower)

    def version_keys_below(self, version: int) -> list[str]:
        """Log objects strictly below ``version`` (for the Reclaimer; one LIST)."""
        keys = []
        for key in self.store.list(LOG_PREFIX):
            number = number_of(key, LOG_PREFIX)
            if number is not None and number < version:
                keys.append(key)
        return keys

    def delete_versions_below(self, version: int) -> int:
        """Delete log versions strictly below ``version``; it must not exceed the GC boundary."""
        boundary = self.gc_boundary()
        if version > boundary.version:
            raise ManifestError(
                f"{self.where}delete_versions_below({version=}) is above the GC boundary version={boundary.version}"
            )
        keys = self.version_keys_below(version)
        self.store.delete(keys)
        with self._lock:
            for number in [n for n in self._versions if n < version]:
                del self._versions[number]
        return len(keys)
