"""Lineage lookups (issue 47): one record, and 10^4 records in one batch, in a large namespace's index.

The index of a namespace of ``--steps`` steps × ``--rows`` rows (``--spans``
records per row) is built as compaction leaves it (``lineage/_compact.py``):
leveled runs, each at most its level's capacity, a catalog naming them with
their fences, and ``--deltas`` deltas not merged yet. It is built directly
(sorted random hashes), not by producing that many TGBs. Lookups then run
against a ``LatencyStore`` (a *model*: ``--rtt-ms`` per request, 100 MB/s
per stream, ``max_in_flight`` concurrent) and a counting wrapper gives the
requests: the LIST, the catalog GET, the block reads and the delta GETs.
``Lineage.lookup`` adds the manifest head and the sources' records (about
4 requests, not built here).

Usage: python benchmarks/lineage_lookup.py [--quick] [--steps N] [--rows N] [--spans N] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save

from torch_tgb.lineage._catalog import Catalog
from torch_tgb.lineage._compact import BASE, capacity
from torch_tgb.lineage._runs import ENTRY, encode_run, empty_summary
from torch_tgb.lineage.index import LineageIndex, run_info
from torch_tgb.lineage.keys import catalog_key, delta_key, run_key
from torch_tgb.storage import LatencyStore, MemoryStore
from torch_tgb.storage._wrapper import ForwardingStore


class Counting(ForwardingStore):
    """Counts the requests that reach the store (a LIST, a GET, each range of a batched read)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.requests = 0
        self._lock = threading.Lock()

    def _count(self, n: int = 1) -> None:
        with self._lock:
            self.requests += n

    def list(self, prefix: str = "") -> list[str]:
        self._count()
        return self.inner.list(prefix)

    def get(self, key: str) -> bytes:
        self._count()
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._count()
        return self.inner.get_range(key, start, end)


def build(store: Any, *, entries: int, steps: int, rows: int, deltas: int, seed: int) -> tuple[np.ndarray, int]:
    """Write the runs, the catalog and the deltas of an index of ``entries`` entries; a sample of its hashes."""
    rng = np.random.default_rng(seed)
    sizes, left, level = [], entries, 1
    while left > 0:  # the levels compaction would leave: the largest at the top, the rest below it
        level_cap = capacity(level, BASE)
        sizes.append(min(left, level_cap))
        left -= sizes[-1]
        level += 1
    runs, sample = [], []
    token = uuid.uuid4().hex
    for level, count in enumerate(sizes, 1):
        run = np.empty(count, dtype=ENTRY)
        run["h"] = np.sort(rng.integers(0, 2**63, size=count, dtype=np.uint64))
        run["step"] = rng.integers(0, steps, size=count, dtype=np.uint32)
        run["row"] = rng.integers(0, rows, size=count, dtype=np.uint32)
        summary = empty_summary(1, 1)
        key = run_key(level, 1, 1, token)
        store.put(key, encode_run(run, summary))
        runs.append(run_info(key, level, run, summary))
        sample.append(rng.choice(run["h"], size=min(count, 20_000), replace=False))
        del run
    store.put(catalog_key(1), Catalog(1, 1, tuple(runs), time.time()).encode())
    for v in range(2, 2 + deltas):
        delta = np.zeros(64, dtype=ENTRY)
        delta["h"] = np.sort(rng.integers(0, 2**63, size=64, dtype=np.uint64))
        store.put(delta_key(v), encode_run(delta, empty_summary(v, v)))
    return np.concatenate(sample), len(sizes)


def lookup(index: LineageIndex, counting: Counting, hashes: np.ndarray) -> dict[str, Any]:
    counting.requests = 0
    t = time.perf_counter()
    found, _ = index.lookup(hashes)
    return {"records": len(hashes), "seconds": time.perf_counter() - t, "requests": counting.requests,
            "found": len(found)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--spans", type=int, default=1, help="records per row (entries = steps x rows x spans)")
    p.add_argument("--deltas", type=int, default=7, help="deltas not merged yet (compaction runs every 8)")
    p.add_argument("--rtt-ms", type=float, default=10.0)
    p.add_argument("--quick", action="store_true", help="10^4 steps")
    add_results_arg(p)
    args = p.parse_args(argv)
    steps = 10_000 if args.quick else args.steps
    entries = steps * args.rows * args.spans
    inner = MemoryStore(f"lineage-bench-{uuid.uuid4().hex[:8]}")
    t = time.perf_counter()
    sample, levels = build(inner, entries=entries, steps=steps, rows=args.rows, deltas=args.deltas, seed=0)
    built = time.perf_counter() - t
    counting = Counting(LatencyStore(inner, rtt=args.rtt_ms / 1e3, bandwidth=100e6))
    index = LineageIndex(counting)
    rng = np.random.default_rng(1)
    one = [lookup(index, counting, sample[[int(rng.integers(len(sample)))]]) for _ in range(5)]
    batch = lookup(index, counting, rng.choice(sample, size=10_000, replace=False))
    result = {
        "model": counting.inner.describe(), "steps": steps, "rows": args.rows, "spans": args.spans,
        "entries": entries, "levels": levels, "deltas": args.deltas, "build_seconds": built,
        "one_record": one, "ten_thousand_records": batch,
    }
    for r in one[:1] + [batch]:
        print(f"{r['records']} record(s): {r['seconds']:.3f} s, {r['requests']} requests, {r['found']} entries")
    print(f"index: {entries} entries in {levels} level(s) + {args.deltas} deltas; {counting.inner.describe()}")
    save(results_dir(args), "lineage_lookup_quick" if args.quick else "lineage_lookup", result)  # keeps the full one
    inner.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
