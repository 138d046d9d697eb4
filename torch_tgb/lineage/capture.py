"""The producer's side of the lineage index: the delta of each version it commits, written as it commits.

A :class:`LineageCapture` belongs to one ``Producer``. ``add`` keeps the
provenance of each appended global batch (its ``provenance`` rows: a few KB
a step) until the offset is committed; ``committed`` is called with the
version that committed them and writes that version's delta
(``index.py``): the sorted ``(record hash, step, row)`` of its steps and
their summary. Every ``compact_every``-th version its committer also merges
the index (``_compact.py``) on a thread of its own, so a lookup never has
more than a few deltas to read. A delta that fails to be written is a gap
that the next lookup fills from the TGBs themselves (``query.py``): the
index is a cache of what the TGBs hold, never the only record.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from torch_tgb.errors import TGBError
from torch_tgb.lineage._compact import compact
from torch_tgb.lineage._runs import merge_entries, steps_entries, summary_of
from torch_tgb.lineage.index import LineageIndex
from torch_tgb.manifest.records import Version
from torch_tgb.storage import ObjectStore
from torch_tgb.transforms.provenance import PROVENANCE_KEY

__all__ = ["COMPACT_EVERY", "LineageCapture", "batch_provenance", "delta_of"]

log = logging.getLogger(__name__)

#: a committer of a version whose number is a multiple of this compacts the index
COMPACT_EVERY = 8


def batch_provenance(batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """``(values [spans, 3], row offsets [rows + 1])`` of a global batch's provenance; None if it has none."""
    rows = batch.get(PROVENANCE_KEY)
    if rows is None:
        return None
    values = getattr(rows, "values", None)
    offsets = getattr(rows, "offsets", None)
    if isinstance(values, torch.Tensor) and isinstance(offsets, torch.Tensor):  # RaggedRows: joined already
        return values.numpy().astype(np.int64, copy=True), offsets.numpy().astype(np.int64, copy=True)
    parts = [torch.as_tensor(r).reshape(-1, 3) for r in rows]
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    joined = torch.cat(parts).numpy().astype(np.int64) if parts else np.zeros((0, 3), np.int64)
    return joined, np.concatenate([[0], np.cumsum(counts)])


def delta_of(version: int, steps: list[tuple[int, np.ndarray, np.ndarray]], dp: int) -> tuple[np.ndarray, dict]:
    """The delta of ``version``: entries and summary of its steps ``(step, values, row offsets)`` cut ``dp`` ways."""
    entries = merge_entries([steps_entries(sorted(steps, key=lambda s: s[0]), dp)])  # in (step, row) order: one sort
    return entries, summary_of(version, version, steps)


class LineageCapture:
    """Collects one producer's provenance per offset and writes each committed version's delta."""

    def __init__(self, store: ObjectStore, producer_id: str, *, dp: int, compact_every: int = COMPACT_EVERY) -> None:
        self.index = LineageIndex(store, where=f"{store.url}: ")
        self.producer_id = producer_id
        self.dp = dp
        self.compact_every = compact_every
        self._pending: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()
        self._compacting: threading.Thread | None = None
        self.active: bool | None = None  # decided by the first batch: whether rows carry provenance

    def add(self, offset: int, batch: Mapping[str, Any]) -> None:
        """Keep the provenance of offset ``offset``'s batch until it is committed."""
        found = batch_provenance(batch)
        if self.active is None:
            self.active = found is not None
        if found is not None:
            with self._lock:
                self._pending[offset] = found

    def committed(self, version: Version) -> None:
        """Write the delta of ``version`` (which committed entries of this producer); never raises.

        Best effort: a failure leaves a gap the next lookup fills.
        """
        if not self.active:
            return
        try:
            steps = []
            with self._lock:
                for i, entry in enumerate(version.entries):
                    if entry.producer != self.producer_id:
                        continue
                    found = self._pending.pop(entry.offset, None)
                    if found is not None:
                        steps.append((version.first_step + i, *found))
                for offset in [o for o in self._pending if o < self._lowest(version)]:
                    del self._pending[offset]
            if steps:
                self.index.write_delta(version.number, *delta_of(version.number, steps, self.dp))
            if version.number % self.compact_every == 0:
                self._compact_in_background()
        except (TGBError, OSError, ValueError) as e:
            log.warning("%s: lineage delta of version %d not written (%s); lookups fill the gap from the TGBs",
                        self.index.where, version.number, e)

    def _lowest(self, version: Version) -> int:
        offsets = [e.offset for e in version.entries if e.producer == self.producer_id]
        return min(offsets) if offsets else -1

    def _compact_in_background(self) -> None:
        if self._compacting is not None and self._compacting.is_alive():
            return
        self._compacting = threading.Thread(target=self._compact, name="tgb-lineage-compact", daemon=True)
        self._compacting.start()

    def _compact(self) -> None:
        try:
            compact(self.index)
        except (TGBError, OSError, ValueError) as e:
            log.warning("%s: lineage compaction failed (%s); the next one retries", self.index.where, e)

    def close(self) -> None:
        """Wait for a compaction in flight."""
        if self._compacting is not None:
            self._compacting.join()
