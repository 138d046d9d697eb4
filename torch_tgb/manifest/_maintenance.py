"""The writes that keep a namespace's log short: snapshots, the hint, the GC boundary, deleting old versions.

A mixin of :class:`~torch_tgb.manifest.Manifest`: committers write snapshots
and the hint after their commits (:meth:`Maintenance.after_commit`); the
Reclaimer advances the boundary and deletes below it. Readers never call
these. The reads they build on (``state_at``, ``gc_boundary`` ...) are the
manifest's own.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from torch_tgb.errors import ManifestError, StorageError
from torch_tgb.manifest import _reads
from torch_tgb.manifest.records import GCBoundary, ManifestState

if TYPE_CHECKING:
    from torch_tgb.manifest._boundary import BoundaryView
    from torch_tgb.manifest._cache import VersionCache
    from torch_tgb.manifest._key_view import KeysView
    from torch_tgb.manifest.keys import KeyLayout
    from torch_tgb.manifest.records import Version
    from torch_tgb.storage import ObjectStore

__all__ = ["Maintenance"]

log = logging.getLogger(__name__)


class Maintenance:
    """Snapshots, hint and GC boundary writes of a :class:`~torch_tgb.manifest.Manifest`."""

    store: ObjectStore
    snapshot_every: int
    _boundary: BoundaryView
    _versions: VersionCache
    _keys: KeysView

    if TYPE_CHECKING:  # the reads of the Manifest this is mixed into
        @property
        def where(self) -> str: ...

        def latest_version(self) -> int: ...

        def state_at(self, number: int, *, boundary: GCBoundary | None = None) -> ManifestState: ...

        def gc_boundary(self) -> GCBoundary: ...

        def read_snapshot(self, number: int) -> ManifestState | None: ...

        def read_version(self, number: int) -> Version: ...

    def key_layout(self) -> KeyLayout:
        """Where this namespace's versions and snapshots live: dataset.json says; without one, the layout its
        versions were found under (probed), and in a namespace without any, the one new namespaces get."""
        if not self._keys.known:
            self._keys.current()  # reads dataset.json
            if not self._keys.known:
                self.latest_version()  # the probes settle it if any version exists
        return self._keys.current()

    def version_key(self, number: int) -> str:
        """The key of version ``number`` in this namespace's layout (:meth:`key_layout`)."""
        return self.key_layout().version_key(number)

    def slot_key(self, number: int) -> str:
        """The key a committer creates version ``number`` at, right after probing for the newest: the
        namespace's layout, or, with neither a dataset.json nor a version found, the one new namespaces get."""
        return self._keys.current().version_key(number)

    def after_commit(self, state: ManifestState, *, others_commit: bool) -> None:
        """What a committer writes after its version ``state.version`` landed: every ``snapshot_every`` versions
        a snapshot (and the hint to it); in between, in a format-2 namespace that others commit to as well,
        the hint alone, so their next probe starts there. Failures cost time, never correctness: logged."""
        number = state.version
        try:
            if number % self.snapshot_every == 0:
                self.write_snapshot(number, state)
            elif state.table is not None and others_commit:
                _reads.put_hint(self.store, number)
        except StorageError as e:
            log.warning("%s: snapshot or hint of version=%d failed: %s", self.store.url, number, e)

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
        _reads.put_snapshot(self.store, state, self._keys.current(), where=self.where)
        return state

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
        self._boundary.put(self.store, boundary)
        return boundary

    def repair_gc_boundary(self) -> GCBoundary:
        """The boundary, after re-creating the highest one seen if storage no longer lists it.

        Generations are immutable, so a late write cannot lower the stored
        boundary; only a deleted generation (by hand, or a store whose LIST
        lags) can. Lower generations re-created by late writes are dropped.
        The Reclaimer calls this first in every pass, before it deletes
        anything.
        """
        return self._boundary.repair(self.store)

    def version_keys_below(self, version: int) -> list[str]:
        """Log objects strictly below ``version`` (for the Reclaimer; one LIST)."""
        return _reads.version_keys_below(self.store, version, self._keys.current())

    def snapshot_keys_below(self, version: int) -> list[str]:
        """Snapshot objects (parts too) strictly below ``version`` (for the Reclaimer; one LIST)."""
        return _reads.snapshot_keys_below(self.store, version, self._keys.current())

    def delete_version_range(self, low: int, high: int) -> int:
        """Delete log versions ``low .. high - 1`` without listing (the Reclaimer knows everything below ``low``
        is gone already); ``high`` must not exceed the GC boundary. Returns how many keys were asked to go."""
        boundary = self.gc_boundary()
        if high > boundary.version:
            raise ManifestError(f"{self.where}delete_version_range({low}, {high}) reaches above the GC boundary "
                                f"version={boundary.version}")
        layout = self._keys.current()
        keys = [layout.version_key(n) for n in range(max(1, low), high)]
        if keys:
            self.store.delete(keys)
        self._versions.drop_below(high)
        return len(keys)

    def delete_versions_below(self, version: int) -> int:
        """Delete log versions strictly below ``version``; it must not exceed the GC boundary."""
        boundary = self.gc_boundary()
        if version > boundary.version:
            raise ManifestError(
                f"{self.where}delete_versions_below({version=}) is above the GC boundary version={boundary.version}"
            )
        keys = self.version_keys_below(version)
        self.store.delete(keys)
        self._versions.drop_below(version)
        return len(keys)
