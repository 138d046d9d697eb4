"""Compaction of the lineage index: deltas into leveled runs, published as a new catalog generation.

Leveled, as LSM trees do: level ``k`` holds at most one run of at most
``BASE * FANOUT**(k-1)`` entries. A compaction takes the deltas that follow
the catalog without a gap, merges them into level 1, and while a level
overflows pushes it whole into the next. So a lookup reads at most one block
per level plus the deltas not compacted yet (at most ``min_deltas`` when
producers compact as they commit), and an entry is rewritten about
``FANOUT / 2`` times per level.

Publishing: the new runs are written under keys of their own (a random
token), then catalog generation ``g + 1`` is created with
``put_if_absent``. A compaction that loses that race deletes its runs and
changes nothing. The winner then deletes what the catalog *before* the
previous one still needed: deltas it covered and runs neither of the two
newest catalogs names (a lookup that read an older catalog lists again when
an object is gone, ``index.py``). Safe to run anywhere, any time, concurrently.

Merges are in memory (a level is read whole): fine up to levels of some
10^8 entries (16 bytes each); docs/provenance.md says where that ends.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from torch_tgb.lineage._catalog import Catalog
from torch_tgb.lineage._runs import decode_run, encode_run, merge_entries, merge_summaries
from torch_tgb.lineage.index import IndexState, LineageIndex, run_info
from torch_tgb.lineage.keys import CATALOG_PREFIX, DELTA_PREFIX, RUNS_PREFIX, catalog_key, number_in, run_key

__all__ = ["BASE", "FANOUT", "compact"]

log = logging.getLogger(__name__)

#: entries of level 1 (4 MiB)
BASE = 1 << 18
#: how much larger each level may grow than the one below it
FANOUT = 8


def capacity(level: int, base: int = BASE) -> int:
    return base * FANOUT ** (level - 1)


def compact(index: LineageIndex, *, min_deltas: int = 8, base: int = BASE,
            clock: Callable[[], float] = time.time) -> Catalog | None:
    """Merge the deltas above the catalog into runs and publish a new catalog; None if there was nothing to do
    (fewer than ``min_deltas`` contiguous deltas) or another compaction won the generation."""
    state = index.state()
    catalog = state.catalog
    versions = []
    v = catalog.covers
    while v + 1 in state.deltas:
        v += 1
        versions.append(v)
    if not versions or len(versions) < min_deltas:
        return None
    store = index.store
    parts = [decode_run(store.get(state.deltas[v]), what=f"{index.where}{state.deltas[v]}") for v in versions]
    carry = merge_entries([p[0] for p in parts])
    summary = merge_summaries([p[1] for p in parts])
    token = uuid.uuid4().hex
    runs = {r.level: r for r in catalog.runs}
    written: list[str] = []
    level = 1
    while True:
        existing = runs.pop(level, None)
        if existing is not None:
            old, old_summary = decode_run(store.get(existing.key), what=f"{index.where}{existing.key}")
            carry = merge_entries([old, carry])
            summary = merge_summaries([old_summary, summary])
        if len(carry) <= capacity(level, base) or level >= 32:
            key = run_key(level, int(summary["lo"]), int(summary["hi"]), token)
            store.put(key, encode_run(carry, summary))
            written.append(key)
            runs[level] = run_info(key, level, carry, summary)
            break
        level += 1  # this level overflows: it moves whole into the next one
    new = Catalog(catalog.generation + 1, versions[-1], tuple(runs[k] for k in sorted(runs)), clock())
    if not store.put_if_absent(catalog_key(new.generation), new.encode()):
        store.delete(written)  # another compaction published this generation: ours names nothing
        return None
    _collect(index, state, catalog, new)
    log.info("%s: lineage compacted versions %d..%d into %d run(s) (generation %d)", index.where, versions[0],
             versions[-1], len(new.runs), new.generation)
    return new


def _collect(index: LineageIndex, state: IndexState, previous: Catalog, new: Catalog) -> None:
    """Delete what neither ``new`` nor ``previous`` needs any more (deltas and runs older than both)."""
    named = {r.key for r in (*new.runs, *previous.runs)}
    doomed = []
    for key in state.keys:
        version = number_in(key, DELTA_PREFIX)
        if version is not None and version <= previous.covers:
            doomed.append(key)
        elif key.startswith(RUNS_PREFIX) and key not in named and _older(key, previous):
            doomed.append(key)
        elif (g := number_in(key, CATALOG_PREFIX)) is not None and g < previous.generation:
            doomed.append(key)
    if doomed:
        index.store.delete(doomed)


def _older(key: str, previous: Catalog) -> bool:
    """Whether a run key not named by the two newest catalogs is an old one (not a concurrent compaction's new run).

    A run covers versions up to its ``hi``; one whose ``hi`` is at or below
    what the previous catalog covers can no longer be published by anyone.
    """
    parts = key[len(RUNS_PREFIX) :].split("-")
    try:
        return int(parts[2]) <= previous.covers
    except (IndexError, ValueError):
        return False

