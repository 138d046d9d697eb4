"""``verify_deny``: scan every live step's TGB in effect for rows that still hold a denied record.

The check behind ``tgb verify NS --deny FILE``. It does not trust the
lineage index: it reads each step's provenance from the TGB a reader would
read (replacements applied), from the GC boundary to the newest version,
and reports every span of a denied record that is left (none after a
complete excision). Cost: a footer and one range per dp slice per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from torch_tgb.lineage._read import tgb_provenance
from torch_tgb.lineage.query import Lineage
from torch_tgb.storage import ObjectStore
from torch_tgb.transforms.provenance import RecordId, record_hash

__all__ = ["DenyReport", "verify_deny"]

_CHUNK = 256


@dataclass(frozen=True)
class DenyReport:
    """Steps scanned, and every span of a denied record still found: ``(record, step, dp, row)``."""

    version: int
    steps: int
    without_provenance: int
    found: list[tuple[str, int, int, int]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len({(s, d, r) for _, s, d, r in self.found})

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "steps": self.steps, "without_provenance": self.without_provenance,
                "rows": self.rows, "found": [list(x) for x in self.found]}


def verify_deny(ns: str | ObjectStore, records: Iterable[RecordId | str], *,
                storage_options: Mapping[str, Any] | None = None) -> DenyReport:
    """Every span of ``records`` that a reader opening now would read (see the module docstring)."""
    with Lineage(ns, storage_options=storage_options, repair=False) as lineage:
        ids = [RecordId.parse(r) if isinstance(r, str) else r for r in records]
        pairs = np.array([lineage.resolve(r) for r in ids], dtype=np.int64).reshape(-1, 2)
        hashes = record_hash(pairs[:, 0], pairs[:, 1])
        names = dict(zip(hashes.tolist(), (str(r) for r in ids)))
        head = lineage.manifest.head()
        start = lineage.manifest.gc_boundary().step
        dp = lineage.layout().dp
        found: list[tuple[str, int, int, int]] = []
        bare = 0
        workers = max(1, min(16, lineage.store.max_in_flight))
        with ThreadPoolExecutor(workers, thread_name_prefix="tgb-deny") as pool:
            for lo in range(start, head.num_steps, _CHUNK):
                entries = lineage.manifest.entries(lo, min(head.num_steps, lo + _CHUNK))
                for i, got in enumerate(pool.map(lambda e: tgb_provenance(lineage.store, e), entries)):
                    if got is None:
                        bare += 1
                        continue
                    values, offsets = got
                    if not len(values):
                        continue
                    hit = np.flatnonzero(np.isin(record_hash(values[:, 0], values[:, 1]), hashes))
                    if not len(hit):
                        continue
                    per = (len(offsets) - 1) // dp
                    rows = np.searchsorted(offsets, hit, side="right") - 1
                    h = record_hash(values[hit, 0], values[hit, 1])
                    found += [(names[int(x)], lo + i, int(r) // per, int(r) % per) for x, r in zip(h.tolist(), rows)]
        return DenyReport(head.version, head.num_steps - start, bare, found)
