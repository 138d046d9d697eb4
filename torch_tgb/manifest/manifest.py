"""``Manifest``: one namespace's manifest log as a client sees it.

Finds the newest version, folds versions into the state at any version,
looks up the version of a step, and writes what lets old versions go
(snapshots, the GC boundary). Parts kept between calls have their own
modules (``_cache.py``: parsed versions; ``_boundary.py``: the GC
boundary, never read lower than seen); stateless work is functions
(``_reads.py``: bounded reads; ``_search.py``: searches over version numbers).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch_tgb.errors import ManifestError, ObjectNotFound, TGBError
from torch_tgb.manifest import _reads
from torch_tgb.manifest._boundary import BoundaryView
from torch_tgb.manifest._continuity import Continuity
from torch_tgb.manifest._maintenance import Maintenance
from torch_tgb.manifest._cache import VersionCache
from torch_tgb.manifest._dataset import ensure_dataset, read_dataset
from torch_tgb.manifest._key_view import KeysView
from torch_tgb.manifest._producers import ProducerTable, decode_bucket
from torch_tgb.manifest._reads import Reclaimed
from torch_tgb.manifest._replacing import ReplacementView
from torch_tgb.manifest._search import collect_entries, probe_newest, search_step
from torch_tgb.manifest._state import fold, state_of
from torch_tgb.manifest._table import bucket_key, state_key
from torch_tgb.manifest.keys import KeyLayout, version_key
from torch_tgb.manifest.records import DatasetInfo, GCBoundary, ManifestState, ProducerState, TGBEntry, Version
from torch_tgb.storage import ObjectStore, RangeRequest

if TYPE_CHECKING:
    from torch_tgb.layout import Layout

__all__ = ["Manifest"]


#: head() starts again from the new boundary this often when reclamations keep passing its replay
_HEAD_ATTEMPTS = 8
#: a committer reads this many versions on from the hint before it gallops with existence checks
SCAN_READS = 4
#: most versions ``entries()`` reads ahead concurrently from a remote store
_ENTRIES_AHEAD = 64


class Manifest(Maintenance):
    """The manifest log of one namespace, read through ``store``. Thread-safe.

    Cost, with n committed versions and K = ``snapshot_every``:

    - ``latest_version()`` cold: boundary + hint + O(log gap) existence probes
      (the gap from the newest snapshot is < 2K unless snapshots stall);
      warm and idle: one probe plus one boundary read.
    - ``entry(step)`` cold: O(log n) version reads (binary search on
      ``first_step`` over version numbers).
    - ``head()`` cold: one snapshot plus < 2K versions replayed; warm: only the
      versions that are new.
    """

    def __init__(self, store: ObjectStore, *, snapshot_every: int = 16, cache_size: int = 512) -> None:
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every={snapshot_every} must be >= 1")
        self.store = store
        self.snapshot_every = snapshot_every
        self._versions = VersionCache(cache_size)
        # a replay fetches versions on threads from a remote store only: a local file answers in microseconds,
        # and starting a pool's threads took milliseconds on a busy machine (a reader's open paid it each time)
        self._fetch_on_threads = store.local_path(version_key(1)) is None and store.max_in_flight > 1
        self._keys = KeysView(store, where=self.where)  # where the numbered objects live (dataset.json)
        self._boundary = BoundaryView()
        self._continuity = Continuity()  # producers' offsets across the versions read in order (format 2)
        self._lock = threading.Lock()  # guards _state's compare-and-set
        # starting points only, read again when it matters (a plain attribute store is atomic under the GIL)
        self._hint: int | None = None  # last hint read
        self._boundary_seen = GCBoundary()  # last boundary read
        self._state: ManifestState | None = None  # newest state folded
        #: the replacement entries applied to the steps read (``_replacing.py``; pinned by a reader)
        self.replacements = ReplacementView(store, where=self.where)

    @property
    def url(self) -> str:
        """The namespace's URL (credentials removed), for messages."""
        return self.store.url

    @property
    def where(self) -> str:
        return f"{self.store.url}: "

    # --- dataset.json --------------------------------------------------------

    def dataset(self) -> DatasetInfo | None:
        """The namespace's dataset description, or ``None`` before the first producer created it."""
        return self._keys.saw(read_dataset(self.store, where=self.where))

    def ensure_dataset(
        self, layout: Layout | Mapping[str, object], schema: Mapping[str, object],
        metadata: Mapping[str, object] | None = None, *, keys: KeyLayout | None = None,
    ) -> DatasetInfo:
        """Create ``dataset.json`` once, or check that ours agrees with the stored one.

        ``layout`` is a :class:`~torch_tgb.layout.Layout` (or its JSON dict).
        Agreement means the same fingerprint, or the same layout and metadata
        with a schema the stored one accepts (``-1`` in a stored trailing
        shape matches any size). Otherwise :class:`SchemaMismatch` names both
        fingerprints. ``keys``: where a namespace created here keeps its
        versions and snapshots (default: spread over 16 prefixes, see
        docs/protocol.md); a namespace that exists keeps its own.
        """
        info = ensure_dataset(self.store, layout, schema, metadata, read=self.dataset, keys=keys)
        self._keys.saw(info)
        return info

    # --- versions ------------------------------------------------------------

    def try_read_version(self, number: int) -> Version | None:
        """Version ``number``, or ``None`` if that object does not exist (yet, or any more)."""
        cached = self._versions.get(number)
        if cached is not None:
            return cached
        data = self._keys.find(lambda keys: self._read_or_none(keys.version_key(number), number))
        if data is None:
            return None
        version = Version.decode(data, number=number, where=self.where)
        self.remember(version)
        return version

    def _read_or_none(self, key: str, number: int) -> bytes | None:
        try:
            return _reads.read_bounded(self.store, key, where=self.where, what=f"manifest version={number}")
        except ObjectNotFound:
            return None

    def read_version(self, number: int) -> Version:
        """Version ``number``; :class:`ObjectNotFound` if it was never committed or was reclaimed."""
        if number < 1:
            raise ValueError(f"{self.where}version={number}: versions are numbered from 1")
        version = self.try_read_version(number)
        if version is None:
            raise ObjectNotFound(
                f"{self.where}manifest version={number} does not exist "
                f"(newest known {self._versions.newest}, GC boundary {self.gc_boundary().version})"
            )
        return version

    def remember(self, version: Version) -> None:
        """Put a version known to be committed into the cache (the committer's own writes: they settle the
        key layout of a namespace that has no dataset.json yet)."""
        self._versions.put(version)
        self._keys.found(self._keys.current())

    def forget(self, number: int) -> None:
        """Drop a cached version (one found to lie in a reclaimed slot)."""
        self._versions.pop(number)

    def _exists(self, number: int) -> bool:
        if number in self._versions:
            return True
        return bool(self._keys.find(lambda keys: self.store.exists(keys.version_key(number)) or None))

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
        self._keys.refresh()
        for _ in range(8):
            known = self._versions.newest
            if known > 0 and known >= boundary.version:
                low = known
            else:
                self._hint = self._read_hint()
                low = max(known, boundary.version, self._hint)
            latest = probe_newest(low, self._exists)
            fresh = self.gc_boundary()
            self._boundary_seen = fresh
            if fresh.version <= latest:
                return self._versions.saw_newest(latest), fresh
            boundary = fresh  # we probed through reclaimed slots: start again from the new boundary
        raise ManifestError(f"{self.where}the GC boundary kept moving while probing for the newest version")

    # --- state, snapshots ----------------------------------------------------

    def _read_hint(self) -> int:
        return _reads.read_hint(self.store, where=self.where)

    def read_snapshot(self, number: int) -> ManifestState | None:
        """The snapshot of version ``number``, or ``None`` if none was written."""
        state = self._keys.find(lambda keys: _reads.read_snapshot(self.store, number, keys, where=self.where))
        return None if state is None else self.with_loader(state)

    def replay(self, state: ManifestState, until: int) -> ManifestState:
        """Fold versions ``state.version + 1 .. until`` onto ``state`` (fetched concurrently from a remote store)."""
        numbers = list(range(state.version + 1, until + 1))
        self._fetch_concurrently(numbers)
        for number in numbers:
            state = fold(state, self.read_version(number), where=self.where)
        return state

    # --- format 2: the newest version names everything -------------------------

    def newest_for_commit(self, known: int, *, expected: int | None = None, at_least: int = 0) -> tuple[float, int]:
        """``(when the answer was known, newest version)`` for a committer whose view is at ``known``.

        O(1) round trips however many versions others wrote meanwhile:
        the search starts from ``known`` or ``at_least``, a version known to
        exist (the slot our create found taken), whichever is newer;
        ``expected == 0`` (others are not committing, by their rate) costs one
        read; otherwise from the hint too, which committers move with each
        commit while others commit, and reads on from it (one or two: the hint
        lags only by the commits in flight; the read of the newest is the one
        the committer needs anyway). No GC-boundary read: the committer reads it after
        its create. (A guess from the rate alone, probed around, cost more:
        the count of others' commits in an interval varies as much as its
        mean, and every miss costs a gallop or a bisection.)
        """
        read_at = time.monotonic()
        self._keys.refresh()
        low = max(known, at_least)
        if expected == 0:
            newest = self._scan_newest(low)
        else:  # (a slot found taken a DAC gap ago is as stale as our view: others commit meanwhile)
            # A hint names a committed version (above the GC boundary, so it exists): the committer reads the
            # version it gets from here and, should it be missing (a hand-made hint), probes again from ``known``.
            hint = self._read_hint()
            read_at = time.monotonic()
            newest = self._scan_newest(max(low, hint))
        return read_at, self._versions.saw_newest(newest)

    def _scan_newest(self, low: int) -> int:
        """The newest version at or above ``low`` (which exists, or is 0), for a committer: read ``low + 1``,
        ``low + 2``, ... (:data:`SCAN_READS` at most, then gallop with existence checks).

        From the hint or a lost slot the newest is a version or two on (the commits in flight), so reading
        on costs the lag plus one request, and the read that finds the newest is also the read of it that the
        committer makes next (it is cached): one request per attempt fewer than existence checks and a read.
        """
        newest = low
        for _ in range(SCAN_READS):
            if self.try_read_version(newest + 1) is None:
                return newest
            newest += 1
        return probe_newest(newest, self._exists)

    def state_of(self, version: Version) -> ManifestState:
        """The full state at format-2 ``version`` (no replay: its table names every producer)."""
        return self.with_loader(state_of(version))

    def table_state(self, number: int) -> ManifestState | None:
        """The state at version ``number`` if it is format 2 (its table), else ``None`` (format 1, or gone)."""
        version = self.try_read_version(number)
        return None if version is None or version.table is None else self.state_of(version)

    def with_loader(self, state: ManifestState) -> ManifestState:
        """``state`` with its producers' table reading buckets through this manifest (format 2)."""
        producers = state.producers
        if isinstance(producers, ProducerTable) and producers._loader is None:
            return dataclasses.replace(state, producers=producers.with_loader(self._load_buckets))
        return state

    def _load_buckets(self, buckets: int, pairs: list[tuple[int, str]]) -> list[dict[str, ProducerState]]:
        """Read buckets of a table of ``buckets`` concurrently (one ``get_ranges``), each checked to be the one named."""
        keys = [bucket_key(i, ref) for i, ref in pairs]
        datas = self.store.get_ranges([RangeRequest(k, 0, _reads.MAX_METADATA_BYTES + 1) for k in keys])
        out = []
        for (index, _), key, data in zip(pairs, keys, datas):
            what = f"{self.where}{key}"
            if not isinstance(data, bytes):  # get_ranges without continue_on_error raises instead
                raise ManifestError(f"{what}: could not be read")
            out.append(decode_bucket(_reads.within_limit(data, what), bucket=index, buckets=buckets, what=what))
        return out

    def pipeline_state(self, producer_id: str, state: ProducerState | None) -> Mapping[str, Any] | None:
        """``producer_id``'s committed pipeline state: inline, or read from its own object (``state_ref``)."""
        if state is None:
            return None
        if state.state_ref is not None:
            return self.read_producer_state(producer_id, state.state_ref)
        return state.state

    def read_producer_state(self, producer_id: str, ref: str) -> dict[str, object]:
        """A producer's pipeline state kept in its own object (read only by that producer)."""
        return _reads.read_state_object(self.store, state_key(producer_id, ref), where=self.where)

    def prefetch(self, numbers: list[int]) -> None:
        """Read versions ``numbers`` into the cache, concurrently from a remote store (errors surface on use)."""
        self._fetch_concurrently(numbers)

    def _fetch_concurrently(self, numbers: list[int]) -> None:
        """Read the versions of ``numbers`` not cached yet into the cache, concurrently from a remote store.

        Errors are left to the reads that follow (a version missing or bad raises there, in order).
        """
        missing = self._versions.missing(numbers)
        if len(missing) > 1 and self._fetch_on_threads:
            workers = min(len(missing), self.store.max_in_flight, 16)
            with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tgb-replay") as pool:
                list(pool.map(self._try_quietly, missing))

    def _try_quietly(self, number: int) -> None:
        try:
            self.try_read_version(number)
        except TGBError:
            pass  # raised again, in order, by the read that needs it

    def state_at(self, number: int, *, boundary: GCBoundary | None = None) -> ManifestState:
        """The full state (steps, producers, sealed) after version ``number``.

        Never reads a version below the GC boundary: a slot there may hold a
        version a stalled committer has just re-created on a stale view (it
        deletes it once it reads the boundary). A cached state below the
        boundary is therefore not replayed from, and a replay that fails
        because the boundary moved past it meanwhile is reported as
        ``Reclaimed`` (callers start again from the boundary).
        """
        if number > 0 and (boundary is not None and number >= boundary.version or number in self._versions):
            version = self.try_read_version(number)  # format 2: the version alone names the whole state
            if version is not None and version.table is not None:
                return self.state_of(version)
        cached = self._state
        if cached is not None and cached.version <= number and (boundary is None or cached.version >= boundary.version):
            try:
                return self._replay_above_boundary(cached, number)
            except Reclaimed:  # the boundary moved past our cached state: start from its snapshot
                boundary = None
                self._hint = None
        if boundary is None:
            boundary = self.gc_boundary()
        if number < boundary.version:
            raise Reclaimed(f"{self.where}state at version={number} is reclaimed (GC boundary version={boundary.version})")
        hint, self._hint = (self._hint if self._hint is not None else self._read_hint()), None
        base = _reads.base_state(self.store, number, boundary, hint, self._keys.current(), where=self.where)
        return self.with_loader(self._replay_above_boundary(base, number))

    def _replay_above_boundary(self, state: ManifestState, number: int) -> ManifestState:
        """``replay(state, number)``; a failure caused by a reclamation since ``state`` raises ``Reclaimed``."""
        try:
            replayed = self.replay(state, number)
        except Reclaimed:
            raise
        except ObjectNotFound as e:  # versions after ``state`` were deleted: reclaimed while we replayed
            raise Reclaimed(f"{self.where}state at version={number}: {e}") from e
        except ManifestError as e:
            # A version that does not follow ``state`` is a fork unless the boundary moved past ``state``:
            # then it is a stalled committer's version in a reclaimed slot, which it deletes itself.
            boundary = self.gc_boundary()
            if boundary.version > state.version:
                self._versions.drop_below(boundary.version)
                raise Reclaimed(f"{self.where}state at version={number}: reclaimed while replaying ({e})") from e
            raise
        if number > state.version:
            boundary = self.gc_boundary()
            if boundary.version > state.version:
                # The boundary passed versions we just read: one re-created in its reclaimed slot by a stalled
                # committer may fold cleanly, so none of them is trusted: start again from the boundary.
                self._versions.drop_below(boundary.version)
                raise Reclaimed(f"{self.where}state at version={number}: the GC boundary moved while replaying")
        return replayed

    def head(self) -> ManifestState:
        """The state at the newest version: version, num_steps, sealed, producers."""
        for attempt in range(_HEAD_ATTEMPTS):
            latest, boundary = self._probe_latest()
            cached = self._state
            if cached is not None and cached.version == latest:
                return cached
            try:
                state = self.state_at(latest, boundary=boundary)
                break
            except Reclaimed:
                # A reclamation ran between our boundary read and our probes: the
                # versions we probed were deleted. Start again from the new boundary.
                self._hint = None
                if attempt == _HEAD_ATTEMPTS - 1:
                    raise
        state = self.with_loader(state)
        with self._lock:
            if self._state is None or self._state.version < state.version:
                self._state = state
        return state

    # --- steps -----------------------------------------------------------------

    def version_of_step(self, step: int, *, latest: int | None = None) -> Version:
        """The version that added ``step``: binary search on ``first_step``, O(log n) reads."""
        if step < 0:
            raise ValueError(f"{self.where}{step=} must be >= 0")
        found = search_step(step, boundary=self.gc_boundary, read=self.read_version, where=self.where,
                            high=lambda low: latest if latest is not None else self._upper_bound_for(step, low))
        if found is None:
            raise ManifestError(f"{self.where}{step=} is not committed (newest version {self._versions.newest})")
        return found

    def _upper_bound_for(self, step: int, low: int) -> int:
        """A version at or after the one holding ``step``: the hinted snapshot if it covers
        ``step`` (a cold reader then skips probing for the newest version), else the newest."""
        if self._versions.newest == 0:  # cold
            hint = self._read_hint()
            if hint >= low:
                snapshot = self.read_snapshot(hint)
                if snapshot is not None and step < snapshot.num_steps:
                    return hint
        return self.latest_version()

    def entry(self, step: int) -> TGBEntry:
        """The TGB entry of ``step`` (a replacement in effect applied: ``_replacing.py``)."""
        version = self.version_of_step(step)
        ref = self.replacements.ref(lambda: self.read_version(self.latest_version()).replaced)
        return self.replacements.apply(ref, step, [version.entries[step - version.first_step]])[0]

    def entries(self, start_step: int, stop_step: int) -> list[TGBEntry]:
        """Entries of steps ``start_step .. stop_step - 1`` that are committed (may be fewer)."""
        if stop_step <= start_step:
            return []
        state = self._state  # a reader asks for steps its last head() counted: that head's version holds them
        latest = state.version if state is not None and state.num_steps >= stop_step else self.latest_version()
        try:
            version = self.version_of_step(start_step, latest=latest)
        except ManifestError:
            if latest == 0 or start_step >= self.read_version(latest).stop_step:
                return []
            raise
        # The versions after it are read forward; from a remote store, as many as the steps asked for could
        # need (each version adds at least one step but for a producer's bump or mark) in one concurrent batch.
        ahead = min(latest - version.number, stop_step - version.stop_step, _ENTRIES_AHEAD)
        if ahead > 1:
            self._fetch_concurrently(list(range(version.number + 1, version.number + 1 + ahead)))
        found = collect_entries(version, start_step, stop_step, latest, self.read_version, where=self.where,
                                seen=lambda v: self._continuity.see(v, where=self.where))
        ref = self.replacements.ref(lambda: self.read_version(latest).replaced)  # one view for the whole range
        return self.replacements.apply(ref, start_step, found)

    # --- GC boundary -------------------------------------------------------

    def gc_boundary(self) -> GCBoundary:
        """The current boundary (``GCBoundary(0, 0)`` before the first reclamation); never goes back.

        The boundary is the highest of its immutable generations on storage
        (:meth:`stored_gc_boundary`), which cannot go back: a late write only
        re-creates a lower generation. This Manifest also never returns less
        than a boundary it already read or wrote (a store whose LIST lags, or
        a generation deleted by hand).
        """
        return self._boundary.current(self.store)

    def stored_gc_boundary(self, generations: list[tuple[int, int]] | None = None) -> GCBoundary:
        """The highest generation under ``_tgb/gc_boundary/`` (one LIST; the names are the values).

        ``generations``: a listing the caller already holds. A namespace
        reclaimed before boundary generations existed holds its boundary in
        ``_tgb/gc_boundary.json``: that is read when no generation exists,
        and the first new generation supersedes it.
        """
        return self._boundary.stored(self.store, generations)
