"""The lineage index of a namespace: from a record's hash to the (step, row) pairs that hold it.

Producers append to it as they commit: the committer of manifest version
``v`` writes the *delta* ``_tgb/lineage/delta/<v>.lin``, the sorted entries of
the steps ``v`` added (``capture.py``). Compactions (``_compact.py``) merge
deltas into at most one run per level and publish a new catalog generation
(``_catalog.py``). A lookup therefore reads (docs/provenance.md, *Cost*):

1. one LIST of ``_tgb/lineage/`` (the catalog generations, deltas, runs);
2. the newest catalog (its runs' fences);
3. all at once (concurrently), one block per run whose fences may hold a
   hash (adjacent blocks merged into one range) and every delta above the
   catalog: for 10^4 records, each needed block once, so one pass.

``versions`` (:meth:`IndexState.missing`) says which versions up to a head
are in neither: the query layer fills those (``query.py``), so an answer is
complete whatever a crashed committer left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from torch_tgb.errors import ObjectNotFound
from torch_tgb.lineage._catalog import Catalog, RunInfo
from torch_tgb.lineage._runs import BLOCK, ENTRY, HEADER, decode_block, decode_run, encode_run
from torch_tgb.lineage.keys import CATALOG_PREFIX, DELTA_PREFIX, LINEAGE_PREFIX, catalog_key, delta_key, number_in
from torch_tgb.manifest._reads import read_bounded
from torch_tgb.storage import ObjectStore

__all__ = ["IndexState", "LineageIndex"]

#: attempts of a lookup whose objects a concurrent compaction removed under it
_ATTEMPTS = 3
#: blocks of a run a lookup reads in one range: needed blocks at most this many apart are read together (a
#: block is 128 KiB, about a round trip's worth of bytes on one stream of an object store), up to ``_RANGE``
_GAP = 8
_RANGE = 64


@dataclass(frozen=True)
class IndexState:
    """What one LIST of the index found: the newest catalog and the deltas above it (version -> key)."""

    catalog: Catalog
    deltas: dict[int, str] = field(default_factory=dict)
    keys: tuple[str, ...] = ()

    @property
    def indexed(self) -> int:
        """The highest version up to which every version is in the catalog or a delta (a contiguous prefix)."""
        v = self.catalog.covers
        while v + 1 in self.deltas:
            v += 1
        return v

    def missing(self, head: int) -> list[int]:
        """Versions ``<= head`` above the catalog that no delta holds."""
        return [v for v in range(self.catalog.covers + 1, head + 1) if v not in self.deltas]


class LineageIndex:
    """Reads and writes one namespace's lineage index through ``store``."""

    def __init__(self, store: ObjectStore, *, where: str = "") -> None:
        self.store = store
        self.where = where

    def state(self) -> IndexState:
        """One LIST of the index, then the newest catalog (one GET)."""
        keys = self.store.list(LINEAGE_PREFIX)
        generations = sorted(g for g in (number_in(k, CATALOG_PREFIX) for k in keys) if g is not None)
        catalog = Catalog()
        if generations:
            g = generations[-1]
            data = read_bounded(self.store, catalog_key(g), where=self.where, what=f"lineage catalog {g}")
            catalog = Catalog.decode(data, generation=g, what=f"{self.where}lineage catalog {g}")
        deltas = {v: k for k in keys if (v := number_in(k, DELTA_PREFIX)) is not None and v > catalog.covers}
        return IndexState(catalog, deltas, tuple(keys))

    def write_delta(self, version: int, entries: np.ndarray, summary: dict) -> None:
        """Write version ``version``'s delta (idempotent: the content is a function of the version's TGBs)."""
        self.store.put(delta_key(version), encode_run(entries, summary))

    def read_delta(self, version: int) -> tuple[np.ndarray, dict]:
        key = delta_key(version)
        return decode_run(self.store.get(key), what=f"{self.where}{key}")

    def lookup(self, hashes: np.ndarray, *, state: IndexState | None = None) -> tuple[np.ndarray, IndexState]:
        """The entries whose hash is in ``hashes``, from the catalog's runs and the deltas above it; the state read.

        A concurrent compaction may remove the objects of the state read
        (older runs, merged deltas): the lookup then lists again.
        """
        wanted = np.unique(np.asarray(hashes, dtype=np.uint64))
        for attempt in range(_ATTEMPTS):
            state = state if state is not None and attempt == 0 else self.state()
            try:
                return self._lookup(wanted, state), state
            except ObjectNotFound:
                if attempt == _ATTEMPTS - 1:
                    raise
                state = None
        raise AssertionError("unreachable")  # pragma: no cover

    def _lookup(self, wanted: np.ndarray, state: IndexState) -> np.ndarray:
        reads: list[tuple[str, int, int, int]] = []  # (key, first entry, stop entry, fence); stop -1: a whole delta
        for run in state.catalog.runs:
            for first, stop in _blocks(run, wanted):
                reads.append((run.key, first, stop, int(run.fences[first // BLOCK])))
        reads.extend((state.deltas[v], 0, -1, 0) for v in sorted(state.deltas))
        if not reads:
            return np.zeros(0, dtype=ENTRY)
        found = self._read_all(reads, wanted)
        return np.concatenate(found) if found else np.zeros(0, dtype=ENTRY)

    def _read_all(self, reads: list[tuple[str, int, int, int]], wanted: np.ndarray) -> list[np.ndarray]:
        """Every read at once (concurrently from a remote store): the entries of each whose hash is wanted."""

        def one(read: tuple[str, int, int, int]) -> np.ndarray:
            key, first, stop, fence = read
            if stop < 0:
                entries, _ = decode_run(self.store.get(key), what=f"{self.where}{key}")
            else:
                data = self.store.get_range(key, HEADER + first * ENTRY.itemsize, HEADER + stop * ENTRY.itemsize)
                entries = decode_block(data, first=first, expect=fence, what=f"{self.where}{key}")
            return entries[np.isin(entries["h"], wanted)]

        workers = min(len(reads), max(1, self.store.max_in_flight), 32)
        if workers == 1:
            return [one(r) for r in reads]
        with ThreadPoolExecutor(workers, thread_name_prefix="tgb-lineage") as pool:
            return list(pool.map(one, reads))


def _blocks(run: RunInfo, wanted: np.ndarray) -> list[tuple[int, int]]:
    """Entry ranges ``[first, stop)`` of ``run`` that may hold any of ``wanted`` (sorted): whole blocks, those at
    most ``_GAP`` apart read together, at most ``_RANGE`` blocks a range (ranges are read concurrently)."""
    if not run.count or not len(wanted):
        return []
    inside = wanted[(wanted >= run.fences[0]) & (wanted <= np.uint64(run.last))]
    if not len(inside):
        return []
    lo = np.maximum(np.searchsorted(run.fences, inside, side="left") - 1, 0)
    hi = np.searchsorted(run.fences, inside, side="right") - 1
    blocks = np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(lo.tolist(), hi.tolist())]))
    out: list[tuple[int, int]] = []
    for b in blocks.tolist():
        first, stop = b * BLOCK, min(run.count, (b + 1) * BLOCK)
        if out and first - out[-1][1] <= (_GAP - 1) * BLOCK and stop - out[-1][0] <= _RANGE * BLOCK:
            out[-1] = (out[-1][0], stop)
        else:
            out.append((first, stop))
    return out


def fences_of(entries: np.ndarray) -> np.ndarray:
    """The hash of every ``BLOCK``-th entry of a sorted run."""
    return np.ascontiguousarray(entries["h"][::BLOCK]).astype(np.uint64)


def run_info(key: str, level: int, entries: np.ndarray, summary: dict) -> RunInfo:
    """The catalog's record of a run written as ``key``."""
    last = int(entries["h"][-1]) if len(entries) else 0
    return RunInfo(key, level, len(entries), int(summary["lo"]), int(summary["hi"]), last, fences_of(entries), summary)


def versions_of(state: IndexState) -> Sequence[int]:
    """The delta versions of ``state``, in order."""
    return sorted(state.deltas)
