"""Reading the manifest log: bounded reads, the version cache, probing, state.

:class:`LogReader` holds everything a :class:`~torch_tgb.manifest.Manifest`
keeps between calls (the store, the LRU of parsed versions, the newest
version known, the last hint and boundary read, the newest state) and every
read of the log's objects: ``dataset.json``, versions, the snapshot hint,
snapshots and the GC boundary. From those it finds the newest version by
probing and the state at a version by replaying from the newest usable
snapshot. Step lookup (``_steps.py``) and the maintenance writes
(``_maintenance.py``) build on it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from torch_tgb.errors import ManifestError, ObjectNotFound
from torch_tgb.manifest._dataset import check_dataset, ensure_dataset
from torch_tgb.manifest._json import MAX_METADATA_BYTES, Fields, load_json
from torch_tgb.manifest._state import fold
from torch_tgb.manifest.keys import (
    DATASET_KEY,
    GC_BOUNDARY_KEY,
    GC_BOUNDARY_PREFIX,
    SNAPSHOT_HINT_KEY,
    boundary_of,
    SNAPSHOT_PREFIX,
    number_of,
    snapshot_key,
    version_key,
)
from torch_tgb.manifest.records import (
    EMPTY_STATE,
    FORMAT,
    DatasetInfo,
    GCBoundary,
    ManifestState,
    Version,
)
from torch_tgb.storage import ObjectStore

__all__ = ["LogReader"]


#: head() starts again from the new boundary this often when reclamations keep passing its replay
_HEAD_ATTEMPTS = 8


class _Reclaimed(ManifestError):
    """The versions needed were reclaimed (possibly while we read): callers may retry from the new boundary."""


class LogReader:
    """The reads of :class:`~torch_tgb.manifest.Manifest`, and the state it caches. Thread-safe."""

    def __init__(self, store: ObjectStore, *, snapshot_every: int = 16, cache_size: int = 512) -> None:
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every={snapshot_every} must be >= 1")
        self.store = store
        self.snapshot_every = snapshot_every
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._versions: OrderedDict[int, Version] = OrderedDict()
        self._known_latest = 0
        self._hint: int | None = None  # last hint read (a starting point only)
        self._boundary_seen = GCBoundary()  # last boundary read (a starting point only)
        self._gc_highest = GCBoundary()  # highest boundary ever read or written: gc_boundary() never goes below
        self._state: ManifestState | None = None

    @property
    def url(self) -> str:
        """The namespace's URL (credentials removed), for messages."""
        return self.store.url

    @property
    def where(self) -> str:
        return f"{self.store.url}: "

    def _get_bounded(self, key: str, what: str | None = None) -> bytes:
        """Read a metadata object, never more than the metadata limit (+1 byte to detect excess).

        A range read, so that an object planted to exhaust memory is refused
        after reading the limit, not after reading all of it.
        """
        data = self.store.get_range(key, 0, MAX_METADATA_BYTES + 1)
        if len(data) > MAX_METADATA_BYTES:
            raise ManifestError(
                f"{self.where}{what or key}: more than {MAX_METADATA_BYTES} bytes exceeds the metadata limit"
            )
        return data

    # --- dataset.json --------------------------------------------------------

    def dataset(self) -> DatasetInfo | None:
        """The namespace's dataset description, or ``None`` before the first producer created it."""
        try:
            data = self._get_bounded(DATASET_KEY)
        except ObjectNotFound:
            return None
        what = f"{self.where}{DATASET_KEY}"
        info = DatasetInfo.decode(data, what=what)
        check_dataset(info, what=what)
        return info

    def ensure_dataset(
        self, layout: Any, schema: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
    ) -> DatasetInfo:
        """Create ``dataset.json`` once, or check that ours agrees with the stored one.

        ``layout`` is a :class:`~torch_tgb.layout.Layout` (or its JSON dict).
        Agreement means the same fingerprint, or the same layout and metadata
        with a schema the stored one accepts (``-1`` in a stored trailing
        shape matches any size). Otherwise :class:`SchemaMismatch` names both
        fingerprints.
        """
        return ensure_dataset(self.store, layout, schema, metadata, read=self.dataset)

    # --- versions ------------------------------------------------------------

    def try_read_version(self, number: int) -> Version | None:
        """Version ``number``, or ``None`` if that object does not exist (yet, or any more)."""
        with self._lock:
            cached = self._versions.get(number)
            if cached is not None:
                self._versions.move_to_end(number)
                return cached
        try:
            data = self._get_bounded(version_key(number), f"manifest version={number}")
        except ObjectNotFound:
            return None
        version = Version.decode(data, number=number, where=self.where)
        self.remember(version)
        return version

    def read_version(self, number: int) -> Version:
        """Version ``number``; :class:`ObjectNotFound` if it was never committed or was reclaimed."""
        if number < 1:
            raise ValueError(f"{self.where}version={number}: versions are numbered from 1")
        version = self.try_read_version(number)
        if version is None:
            raise ObjectNotFound(
                f"{self.where}manifest version={number} does not exist "
                f"(newest known {self._known_latest}, GC boundary {self.gc_boundary().version})"
            )
        return version

    def remember(self, version: Version) -> None:
        """Put a version known to be committed into the cache (the committer's own writes)."""
        with self._lock:
            self._versions[version.number] = version
            self._versions.move_to_end(version.number)
            while len(self._versions) > self._cache_size:
                self._versions.popitem(last=False)
            self._known_latest = max(self._known_latest, version.number)

    def forget(self, number: int) -> None:
        """Drop a cached version (one found to lie in a reclaimed slot)."""
        with self._lock:
            self._versions.pop(number, None)

    def _exists(self, number: int) -> bool:
        with self._lock:
            if number in self._versions:
                return True
        return self.store.exists(version_key(number))

    def latest_version(self) -> int:
        """The newest committed version (0 for an empty namespace), found by probing.

        Start from the best lower bound known (our own newest, the snapshot
        hint, the GC boundary), then probe existence at +1, +2, +4, ... and
        binary-search the gap. Versions above the boundary exist without holes
        (v+1 is only written by someone who read v), so existence is monotone there.
        """
        return self._probe_latest()[0]

    def _probe_latest(self) -> tuple[int, GCBoundary]:
        """The newest version and a boundary read *after* the probes, at or below it.

        Reading the boundary after probing validates the answer: if a
        reclamation deleted versions we probed, the fresh boundary lies above
        our answer and we probe again from it. A warm idle poll costs one
        existence check plus this boundary read.
        """
        boundary = self._boundary_seen
        for _ in range(8):
            with self._lock:
                known = self._known_latest
            if known > 0 and known >= boundary.version:
                low = known
            else:
                self._hint = self._read_hint()
                low = max(known, boundary.version, self._hint)
            latest = self._probe_from(low)
            fresh = self.gc_boundary()
            self._boundary_seen = fresh
            if fresh.version <= latest:
                with self._lock:
                    self._known_latest = max(self._known_latest, latest)
                    return self._known_latest, fresh
            boundary = fresh  # we probed through reclaimed slots: start again from the new boundary
        raise ManifestError(f"{self.where}the GC boundary kept moving while probing for the newest version")

    def _probe_from(self, low: int) -> int:
        if not self._exists(low + 1):
            return low
        good, step = low + 1, 1
        while True:
            step *= 2
            if self._exists(low + step):
                good = low + step
            else:
                bad = low + step
                break
        while bad - good > 1:
            mid = (good + bad) // 2
            if self._exists(mid):
                good = mid
            else:
                bad = mid
        return good

    # --- state, snapshots ----------------------------------------------------

    def _read_hint(self) -> int:
        try:
            data = self._get_bounded(SNAPSHOT_HINT_KEY)
        except ObjectNotFound:
            return 0
        what = f"{self.where}{SNAPSHOT_HINT_KEY}"
        f = Fields(load_json(data, what=what), what=what)
        if f.string("format") != FORMAT:
            raise ManifestError(f"{what}: unknown format")
        number = f.integer("version")
        f.done()
        return number

    def read_snapshot(self, number: int) -> ManifestState | None:
        """The snapshot of version ``number``, or ``None`` if none was written."""
        key = snapshot_key(number)
        try:
            data = self._get_bounded(key)
        except ObjectNotFound:
            return None
        state = ManifestState.decode(data, what=f"{self.where}{key}")
        if state.version != number:
            raise ManifestError(f"{self.where}{key}: snapshot says version={state.version}")
        return state

    def _base_state(self, at_most: int, boundary: GCBoundary | None = None) -> ManifestState:
        """The newest snapshot at or below version ``at_most`` that can be replayed from."""
        if boundary is None:
            boundary = self.gc_boundary()
        if at_most < boundary.version:
            raise _Reclaimed(
                f"{self.where}state at version={at_most} is reclaimed (GC boundary is version={boundary.version})"
            )
        hint, self._hint = (self._hint if self._hint is not None else self._read_hint()), None
        for candidate in (hint, boundary.version):
            if boundary.version <= candidate <= at_most and candidate > 0:
                state = self.read_snapshot(candidate)
                if state is not None:
                    return state
        numbers = [n for k in self.store.list(SNAPSHOT_PREFIX) if (n := number_of(k, SNAPSHOT_PREFIX)) is not None]
        for candidate in sorted((n for n in numbers if boundary.version <= n <= at_most), reverse=True):
            state = self.read_snapshot(candidate)
            if state is not None:
                return state
        if boundary.version > 0:
            raise ManifestError(f"{self.where}snapshot of GC boundary version={boundary.version} is missing")
        return EMPTY_STATE

    def replay(self, state: ManifestState, until: int) -> ManifestState:
        """Fold versions ``state.version + 1 .. until`` onto ``state`` (fetched concurrently)."""
        numbers = list(range(state.version + 1, until + 1))
        with self._lock:
            missing = [n for n in numbers if n not in self._versions]
        if len(missing) > 1:
            workers = min(len(missing), self.store.max_in_flight, 16)
            with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tgb-replay") as pool:
                list(pool.map(self.try_read_version, missing))  # fills the cache; errors re-raise below
        for number in numbers:
            state = fold(state, self.read_version(number), where=self.where)
        return state

    def state_at(self, number: int, *, boundary: GCBoundary | None = None) -> ManifestState:
        """The full state (steps, producers, sealed) after version ``number``.

        Never reads a version below the GC boundary: a slot there may hold a
        version a stalled committer has just re-created on a stale view (it
        deletes it once it reads the boundary). A cached state below the
        boundary is therefore not replayed from, and a replay that fails
        because the boundary moved past it meanwhile is reported as
        :class:`_Reclaimed` (callers start again from the boundary).
        """
        with self._lock:
            cached = self._state
        if cached is not None and cached.version <= number and (boundary is None or cached.version >= boundary.version):
            try:
                return self._replay_above_boundary(cached, number)
            except _Reclaimed:  # the boundary moved past our cached state: start from its snapshot
                boundary = None
                with self._lock:
                    self._hint = None
        return self._replay_above_boundary(self._base_state(number, boundary), number)

    def _replay_above_boundary(self, state: ManifestState, number: int) -> ManifestState:
        """``replay(state, number)``; a failure caused by a reclamation since ``state`` raises :class:`_Reclaimed`."""
        try:
            replayed = self.replay(state, number)
        except _Reclaimed:
            raise
        except ObjectNotFound as e:  # versions after ``state`` were deleted: reclaimed while we replayed
            raise _Reclaimed(f"{self.where}state at version={number}: {e}") from e
        except ManifestError as e:
            # A version that does not follow ``state`` is a fork unless the boundary moved past ``state``:
            # then it is a stalled committer's version in a reclaimed slot, which it deletes itself.
            boundary = self.gc_boundary()
            if boundary.version > state.version:
                self._forget_below(boundary.version)
                raise _Reclaimed(f"{self.where}state at version={number}: reclaimed while replaying ({e})") from e
            raise
        if number > state.version:
            boundary = self.gc_boundary()
            if boundary.version > state.version:
                # The boundary passed versions we just read: one re-created in its reclaimed slot by a stalled
                # committer may fold cleanly, so none of them is trusted: start again from the boundary.
                self._forget_below(boundary.version)
                raise _Reclaimed(f"{self.where}state at version={number}: the GC boundary moved while replaying")
        return replayed

    def _forget_below(self, version: int) -> None:
        """Drop cached versions below ``version``: nobody reads below the boundary, and one may be a stale re-creation."""
        with self._lock:
            for number in [n for n in self._versions if n < version]:
                del self._versions[number]

    def head(self) -> ManifestState:
        """The state at the newest version: version, num_steps, sealed, producers."""
        for attempt in range(_HEAD_ATTEMPTS):
            latest, boundary = self._probe_latest()
            with self._lock:
                cached = self._state
            if cached is not None and cached.version == latest:
                return cached
            try:
                state = self.state_at(latest, boundary=boundary)
                break
            except _Reclaimed:
                # A reclamation ran between our boundary read and our probes: the
                # versions we probed were deleted. Start again from the new boundary.
                with self._lock:
                    self._hint = None
                if attempt == _HEAD_ATTEMPTS - 1:
                    raise
        with self._lock:
            if self._state is None or self._state.version < state.version:
                self._state = state
        return state

    # --- GC boundary -------------------------------------------------------

    def gc_boundary(self) -> GCBoundary:
        """The current boundary (``GCBoundary(0, 0)`` before the first reclamation); never goes back.

        The boundary is the highest of its immutable generations on storage
        (:meth:`stored_gc_boundary`), which cannot go back: a late write only
        re-creates a lower generation. This Manifest also never returns less
        than a boundary it already read or wrote (a store whose LIST lags, or
        a generation deleted by hand).
        """
        return self._at_least_seen(self.stored_gc_boundary())

    def _at_least_seen(self, stored: GCBoundary) -> GCBoundary:
        """``stored``, or the higher boundary this Manifest already read or wrote."""
        with self._lock:
            if _order(stored) < _order(self._gc_highest):
                return self._gc_highest
            self._gc_highest = stored
        return stored

    def stored_gc_boundary(self, generations: list[tuple[int, int]] | None = None) -> GCBoundary:
        """The highest generation under ``_tgb/gc_boundary/`` (one LIST; the names are the values).

        ``generations``: a listing the caller already holds (:meth:`_boundary_generations`).
        A namespace reclaimed before boundary generations existed holds its
        boundary in ``_tgb/gc_boundary.json``: that is read when no generation
        exists, and the first new generation supersedes it.
        """
        if generations is None:
            generations = self._boundary_generations()
        if generations:
            return GCBoundary(*generations[-1])
        try:
            data = self._get_bounded(GC_BOUNDARY_KEY)
        except ObjectNotFound:
            return GCBoundary()
        return GCBoundary.decode(data, what=f"{self.where}{GC_BOUNDARY_KEY}")

    def _boundary_generations(self) -> list[tuple[int, int]]:
        """``(version, step)`` of every boundary generation on storage, lowest first (one LIST)."""
        return sorted(g for g in map(boundary_of, self.store.list(GC_BOUNDARY_PREFIX)) if g is not None)

    def _saw_gc_boundary(self, boundary: GCBoundary) -> None:
        with self._lock:
            if _order(boundary) > _order(self._gc_highest):
                self._gc_highest = boundary


def _order(boundary: GCBoundary) -> tuple[int, int]:
    return boundary.version, boundary.step
