"""Discovery at scale (issue 41): one node's manifest requests per second, with and without the node share.

``P`` reader processes on one "node" (real processes, forked), each a
``ManifestPoller`` over a ``Manifest`` over (``after``) a ``NodeSharedStore``
in one node directory, over its own ``CountingStore`` over a ``LatencyStore``
(a model: 20 ms first byte, 100 MB/s per stream) over one local namespace.
A committer thread commits one version (one TGB) per second for ``busy_s``
seconds, then nothing for ``idle_s`` seconds. The processes count on their
"remote" side (what would reach S3) and the counts are summed: the node's
requests per second caught up (one new step per second) and idle, by key
class and S3 request type, and the latency from a commit to each process
seeing its step. ``before`` is the same without the node share.

Projected to R = 1,024 and 8,192 ranks at 8 ranks per node against S3's
~5,500 GET/HEAD per second per partitioned prefix (the goals of issue 41:
caught up <= 0.5x of it at R = 8,192, idle <= 0.1x).

    python benchmarks/_scale_discovery.py [--quick] [--readers 8] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from torch_tgb.datapipes.read.poller import ManifestPoller, PollPolicy
from torch_tgb.layout import Layout
from torch_tgb.manifest import Committer, Manifest, TGBEntry
from torch_tgb.storage import LatencyStore, LocalStore, NodeSharedStore, ObjectStore
from torch_tgb.storage.node_share import DEFAULT_BOUNDARY_TTL, DEFAULT_TTL
from torch_tgb.testing.counting import REQUEST_TYPES, CountingStore, merge_reports

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, pct, results_dir, save  # noqa: E402

S3_PREFIX_LIMIT = 5500.0
RANKS_PER_NODE = 8
FLEETS = (1024, 8192)
HISTORY = 20  # versions committed before the readers start (a snapshot and a boundary generation exist)


def _entry(offset: int) -> TGBEntry:
    return TGBEntry(f"data/p0/e000001-o{offset:012d}-0.tgb", 1 << 20, (1 << 20) - 4096, 4072, "p0", offset, 64, 131072)


def _commit(committer: Committer) -> None:
    result = committer.attempt([_entry(committer.next_offset)])
    if not result.committed:
        raise RuntimeError(f"commit failed: {result}")


def _reader(root: str, node_dir: str | None, ttl: float, boundary_ttl: float, rtt: float,
            schedule: list[float], results: Any) -> None:
    """One reader process: polls until the last sample time, sampling its remote counts at ``schedule``."""
    remote = CountingStore(LatencyStore(LocalStore(root), rtt=rtt, bandwidth=100e6))
    store: ObjectStore = remote if node_dir is None else NodeSharedStore(
        remote, node_dir, ttl=ttl, boundary_ttl=boundary_ttl)
    poller = ManifestPoller(Manifest(store), 0, policy=PollPolicy(warn_every=None), timeout=None)
    poller.reset()
    samples: list[dict[str, Any]] = []

    def sample() -> None:
        for at in schedule:
            time.sleep(max(0.0, at - time.time()))
            samples.append(remote.report())
        poller.interrupt()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seen: dict[int, float] = {}
    try:
        while True:
            item = poller.next()
            seen[item.step] = time.time()
    except StopIteration:
        pass
    sampler.join()
    counters = getattr(store, "counters", {})
    results.put({"samples": samples, "seen": seen, "counters": dict(counters)})


def _rates(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, Any]:
    """Requests per second between two summed reports."""
    def per_s(a: float, b: float) -> float:
        return round((b - a) / seconds, 3)

    return {
        "requests_per_s": per_s(before["requests"], after["requests"]),
        "manifest_requests_per_s": per_s(before["manifest_requests"], after["manifest_requests"]),
        "by_type_per_s": {t: per_s(before["by_type"][t], after["by_type"][t]) for t in REQUEST_TYPES},
        "by_class_per_s": {c: per_s(before["by_class"][c]["requests"], after["by_class"][c]["requests"])
                           for c in after["by_class"] if after["by_class"][c]["requests"]},
        "manifest_bytes_per_s": per_s(
            sum(before["by_class"][c]["bytes"] for c in ("log", "snapshot", "hint", "boundary", "dataset")),
            sum(after["by_class"][c]["bytes"] for c in ("log", "snapshot", "hint", "boundary", "dataset"))),
    }


def project(per_node: float) -> dict[str, Any]:
    """The fleet's requests/s at R ranks (8 per node) and its ratio to one S3 prefix's limit."""
    out = {}
    for ranks in FLEETS:
        fleet = per_node * ranks / RANKS_PER_NODE
        out[f"R={ranks}"] = {"requests_per_s": round(fleet, 1), "x_prefix_limit": round(fleet / S3_PREFIX_LIMIT, 3)}
    return out


def measure(*, share: bool, readers: int = RANKS_PER_NODE, rate: float = 1.0, busy_s: float = 10.0,
            idle_s: float = 8.0, rtt: float = 0.020, ttl: float = DEFAULT_TTL,
            boundary_ttl: float = DEFAULT_BOUNDARY_TTL, warmup_s: float = 3.0) -> dict[str, Any]:
    """One node of ``readers`` processes, caught up at ``rate`` new steps/s then idle: its requests and latencies."""
    with tempfile.TemporaryDirectory(prefix="tgb-scale-") as tmp:
        root = os.path.join(tmp, "ns")
        store = LocalStore(root)
        Manifest(store).ensure_dataset(Layout(), {"x": {"dtype": "int32", "shape": [-1]}})
        committer = Committer(Manifest(store), "p0")
        committer.start()
        for _ in range(HISTORY):
            _commit(committer)
        settle = ttl + PollPolicy().max_interval + 1.0 if share else PollPolicy().max_interval + 1.0
        t0 = time.time() + warmup_s
        schedule = [t0, t0 + busy_s, t0 + busy_s + settle, t0 + busy_s + settle + idle_s]
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        results = ctx.Queue()
        node_dir = os.path.join(tmp, "node") if share else None
        procs = [ctx.Process(target=_reader, args=(root, node_dir, ttl, boundary_ttl, rtt, schedule, results))
                 for _ in range(readers)]
        for p in procs:
            p.start()
        committed: dict[int, float] = {}
        next_at = t0 - 0.5
        while next_at < t0 + busy_s:
            time.sleep(max(0.0, next_at - time.time()))
            step = committer.next_offset
            _commit(committer)
            committed[step] = time.time()
            next_at += 1.0 / rate
        outcomes = [results.get(timeout=busy_s + idle_s + settle + 120) for _ in procs]
        for p in procs:
            p.join(30)
    samples = [merge_reports(o["samples"][i] for o in outcomes) for i in range(4)]
    latencies = [o["seen"][s] - at for o in outcomes for s, at in committed.items() if s in o["seen"]]
    missed = sum(1 for o in outcomes for s in committed if s not in o["seen"])
    caught_up = _rates(samples[0], samples[1], busy_s)
    idle = _rates(samples[2], samples[3], idle_s)
    counters = merge_reports(o["counters"] for o in outcomes)
    return {
        "share": share, "readers": readers, "rate_steps_per_s": rate, "busy_s": busy_s, "idle_s": idle_s,
        "rtt_s": rtt, "ttl_s": ttl if share else None, "boundary_ttl_s": boundary_ttl if share else None,
        "caught_up": {**caught_up, "projected": project(caught_up["manifest_requests_per_s"])},
        "idle": {**idle, "projected": project(idle["manifest_requests_per_s"])},
        "notice_latency_s": {
            "mean": round(statistics.fmean(latencies), 3) if latencies else None,
            "p50": round(pct(latencies, 50), 3), "p95": round(pct(latencies, 95), 3),
            "max": round(max(latencies), 3) if latencies else None, "missed": missed,
        },
        "share_counters": counters,
    }


def _line(name: str, r: dict[str, Any]) -> str:
    c, i, lat = r["caught_up"], r["idle"], r["notice_latency_s"]
    big = c["projected"][f"R={FLEETS[-1]}"]["x_prefix_limit"]
    idle_big = i["projected"][f"R={FLEETS[-1]}"]["x_prefix_limit"]
    return (f"{name:7s} caught up {c['manifest_requests_per_s']:7.2f} req/s/node ({big:6.3f}x at R={FLEETS[-1]}), "
            f"idle {i['manifest_requests_per_s']:6.2f} req/s/node ({idle_big:6.3f}x); "
            f"notice latency mean {lat['mean']}s p95 {lat['p95']}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 s busy, 4 s idle (a smoke run)")
    parser.add_argument("--readers", type=int, default=RANKS_PER_NODE)
    parser.add_argument("--ttl", type=float, default=DEFAULT_TTL)
    parser.add_argument("--boundary-ttl", type=float, default=DEFAULT_BOUNDARY_TTL)
    add_results_arg(parser)
    args = parser.parse_args(argv)
    busy, idle = (4.0, 4.0) if args.quick else (10.0, 8.0)
    model = LatencyStore(LocalStore(tempfile.gettempdir()), rtt=0.020).describe()
    print(model)
    runs = {}
    for name, share in (("before", False), ("after", True)):
        runs[name] = measure(share=share, readers=args.readers, busy_s=busy, idle_s=idle, ttl=args.ttl,
                             boundary_ttl=args.boundary_ttl)
        print(_line(name, runs[name]), flush=True)
    for name, r in runs.items():
        c = r["caught_up"]
        print(f"{name}: caught up by type {c['by_type_per_s']}, by class {c['by_class_per_s']}")
        print(f"{name}: idle by type {r['idle']['by_type_per_s']}, by class {r['idle']['by_class_per_s']}")
    save(results_dir(args), "scale_discovery", {"model": model, "s3_prefix_limit": S3_PREFIX_LIMIT,
                                                "ranks_per_node": RANKS_PER_NODE, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
