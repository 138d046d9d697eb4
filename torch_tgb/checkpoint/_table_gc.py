"""Reclaiming the producers' table of format 2: old buckets and pipeline states no one will read again.

A bucket object or a pipeline-state object carries in its name the slot of
the commit attempt that wrote it (``_tgb/producers/<b>/<slot>-<tok>.json``,
``_tgb/state/<producer>/<slot>-<digest>.json``). Who reads them: a
committer reads its own bucket of the newest version and its own newest
pipeline state; a committer stalled past a reclamation compares its commit
with the GC boundary version's state (``commit.py``, step 4). So one is
deleted when

- its slot lies below the GC boundary version (a committer writes new ones
  for the slot it attempts, never for an older one), and
- neither the boundary version's table nor ``head``'s (read after the
  listing) names it: a bucket by reference, a state as its producer's
  state there.

Everything else is kept, including objects of attempts that lost their
slot above the boundary: they go once the boundary passes them. An idle
pass costs the two LISTs here and nothing more.
"""

from __future__ import annotations

from torch_tgb.manifest._table import PRODUCERS_PREFIX, STATE_PREFIX, TableRef, state_key
from torch_tgb.manifest.manifest import Manifest
from torch_tgb.manifest.records import GCBoundary, ManifestState

__all__ = ["reclaim_table_objects"]


def _slot(key: str) -> int | None:
    """The slot number in a table object's name (``.../<slot:020d>-<tok>.json``); None for a foreign key."""
    name = key.rsplit("/", 1)[-1]
    digits = name.split("-", 1)[0]
    return int(digits) if len(digits) == 20 and digits.isdigit() and name.endswith(".json") else None


def reclaim_table_objects(manifest: Manifest, boundary: GCBoundary, head: ManifestState) -> int:
    """Delete bucket and pipeline-state objects below ``boundary`` that neither it nor ``head`` names; returns how many."""
    if boundary.version == 0:
        return 0
    store = manifest.store
    candidates = [k for prefix in (PRODUCERS_PREFIX, STATE_PREFIX) for k in store.list(prefix)
                  if (slot := _slot(k)) is not None and slot < boundary.version]
    if not candidates:
        return 0
    at_boundary = manifest.table_state(boundary.version)
    tables: list[tuple[TableRef, ManifestState]] = [
        (s.table, s) for s in (at_boundary, head) if s is not None and s.table is not None
    ]
    keep = {t.key(i) for t, _ in tables for i in range(len(t.buckets)) if t.buckets[i]}
    keep.update(state_key(pid, p.state_ref) for _, s in tables for pid, p in s.producers.items() if p.state_ref)
    doomed = sorted(k for k in candidates if k not in keep)
    if doomed:
        store.delete(doomed)
    return len(doomed)
