"""GetBatch analogue (seed 003 Table 1): one ordered batched ``get_ranges`` call vs individual GETs.

For object sizes 10 KiB / 100 KiB / 1 MiB and batches of 32 / 64 / 128
objects, reads a batch either with one ``store.get_ranges`` call (ordered
results, ``max_in_flight`` streams) or with individual ``get_range`` calls
one after another, and reports GiB/s and the speed-up beside the paper's.

Stores: ``LatencyStore`` (a model: 10 ms RTT, 100 MB/s per stream), the same
model behind one shared 10 Gbit/s link (``SharedLinkStore`` from
consumer_read.py; bounds large objects the way a NIC does), and with
``--s3`` a moto S3 server on loopback: moto is server-bound (about 150 small
GETs/s on 2 cores), so its ratio shows our client's concurrency against one
Python server, not an object store.

Usage: python benchmarks/getbatch.py [--quick] [--s3] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save, spread

from torch_tgb.storage import LatencyStore, MemoryStore, RangeRequest, open_store

KIB = 1024
# seed 003 Table 1: speed-up of GetBatch over individual GET (AIStore, 16 nodes)
PAPER = {10 * KIB: {32: 9.0, 64: 12.0, 128: 15.0}, 100 * KIB: {32: 4.9, 64: 5.7, 128: 6.2},
         1024 * KIB: {32: 1.5, 64: 1.6, 128: 1.7}}


def _fill(store: Any, size: int, count: int) -> list[RangeRequest]:
    prefix = uuid.uuid4().hex[:8]
    payload = bytes(range(256)) * (size // 256 + 1)
    keys = [f"gb/{prefix}/{i:05d}" for i in range(count)]
    for k in keys:
        store.put(k, payload[:size])
    return [RangeRequest(k, 0, size) for k in keys]


def _individual(store: Any, reqs: list[RangeRequest]) -> float:
    t = time.perf_counter()
    out = [store.get_range(r.key, r.start, r.end) for r in reqs]
    elapsed = time.perf_counter() - t
    assert len(out) == len(reqs)
    return elapsed


def _batched(store: Any, reqs: list[RangeRequest]) -> float:
    t = time.perf_counter()
    out = store.get_ranges(reqs)
    elapsed = time.perf_counter() - t
    assert [len(b) for b in out] == [r.end - r.start for r in reqs]  # ordered, complete
    return elapsed


def measure(store: Any, sizes: list[int], batches: list[int], repeats: int) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        reqs = _fill(store, size, max(batches))
        for batch in batches:
            ind, bat = [], []
            for r in range(repeats):  # interleaved A B B A
                if r % 2 == 0:
                    ind.append(_individual(store, reqs[:batch]))
                    bat.append(_batched(store, reqs[:batch]))
                else:
                    bat.append(_batched(store, reqs[:batch]))
                    ind.append(_individual(store, reqs[:batch]))
            speedups = [i / b for i, b in zip(ind, bat)]
            gib = size * batch / 2**30
            row = {"object_bytes": size, "batch": batch, "individual_gib_s": spread([gib / t for t in ind]),
                   "batched_gib_s": spread([gib / t for t in bat]), "speedup": spread(speedups),
                   "paper_speedup": PAPER.get(size, {}).get(batch)}
            rows.append(row)
            print(f"  {size // KIB:>5} KiB x {batch:>3}: individual {row['individual_gib_s']['median']:.3f} GiB/s, "
                  f"batched {row['batched_gib_s']['median']:.3f} GiB/s, speed-up {row['speedup']['median']:.1f}x "
                  f"(paper {row['paper_speedup']}x)", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 32 only, one repeat")
    parser.add_argument("--s3", action="store_true", help="also on a moto S3 server on loopback (server-bound)")
    parser.add_argument("--rtt-ms", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=None)
    add_results_arg(parser)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    from consumer_read import SharedLinkStore

    out = results_dir(args)
    repeats = args.repeats or (1 if args.quick else 3)
    batches = [32] if args.quick else [32, 64, 128]
    sizes = [10 * KIB, 100 * KIB, 1024 * KIB]
    models = {
        "latency": LatencyStore(MemoryStore(), rtt=args.rtt_ms / 1e3, bandwidth=100e6),
        "latency_shared_link": SharedLinkStore(MemoryStore(), rtt=args.rtt_ms / 1e3, bandwidth=100e6,
                                               link_bandwidth=1.25e9),
    }
    result: dict[str, Any] = {"quick": args.quick, "paper": "seed 003 Table 1 (AIStore GetBatch vs GET)",
                              "paper_speedup": {str(k): v for k, v in PAPER.items()}, "stores": {}}
    for name, store in models.items():
        print(f"{name}: {store.describe()}" + (" + one shared 10 Gbit/s link" if "shared" in name else ""), flush=True)
        result["stores"][name] = {"describe": store.describe(), "max_in_flight": store.max_in_flight,
                                  "rows": measure(store, sizes, batches, repeats)}
    if args.s3:
        from torch_tgb.testing.s3server import MotoS3Server

        with MotoS3Server(separate_process=True) as server:
            url, options = server.namespace()
            store = open_store(url, storage_options=options)
            print(f"moto S3 on loopback ({url}): server-bound, about 150 small GETs/s on 2 cores", flush=True)
            result["stores"]["moto_s3"] = {
                "describe": "moto S3 server on 127.0.0.1 in a separate process; server-bound (one Python server, "
                "~150 small GETs/s on 2 cores): the ratio is client concurrency against that server",
                "max_in_flight": store.max_in_flight,
                "rows": measure(store, [10 * KIB, 100 * KIB], [32], 1 if args.quick else 2),
            }
    save(out, "getbatch", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
