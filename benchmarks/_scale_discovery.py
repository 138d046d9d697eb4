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

``--layouts``: the same node (with the node share) on a namespace of flat
manifest keys and on one spread over 16 prefixes (docs/protocol.md,
*Manifest keys spread over prefixes*), interleaved over ``--rounds``: how
many prefixes the manifest's requests spread over and the busiest prefix's
share, projected to R = 8,192. It adds ``layouts`` to scale_discovery.json
and leaves the runs above as they are.

    python benchmarks/_scale_discovery.py [--quick] [--readers 8] [--results-dir DIR]
    python benchmarks/_scale_discovery.py --layouts [--rounds 3] [--results-dir DIR]
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
from torch_tgb.manifest import Committer, KeyLayout, Manifest, TGBEntry
from torch_tgb.manifest.keys import FLAT, SPREAD_PREFIXES
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

    prefixes = {p: per_s(before.get("manifest_by_prefix", {}).get(p, 0), n)
                for p, n in after.get("manifest_by_prefix", {}).items()}
    prefixes = {p: r for p, r in sorted(prefixes.items()) if r > 0}
    return {
        "manifest_by_prefix_per_s": prefixes,
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
            boundary_ttl: float = DEFAULT_BOUNDARY_TTL, warmup_s: float = 3.0,
            keys: KeyLayout | None = None) -> dict[str, Any]:
    """One node of ``readers`` processes, caught up at ``rate`` new steps/s then idle: its requests and latencies."""
    with tempfile.TemporaryDirectory(prefix="tgb-scale-") as tmp:
        root = os.path.join(tmp, "ns")
        store = LocalStore(root)
        Manifest(store).ensure_dataset(Layout(), {"x": {"dtype": "int32", "shape": [-1]}}, keys=keys)
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


def spread_of(rates: dict[str, Any]) -> dict[str, Any]:
    """How many prefixes the manifest's requests of a window took, and the busiest one's rate projected per fleet."""
    by_prefix = rates["manifest_by_prefix_per_s"]
    busiest = max(by_prefix.values(), default=0.0)
    total = sum(by_prefix.values())
    return {
        "prefixes": len(by_prefix),
        "busiest_prefix": max(by_prefix, key=lambda p: by_prefix[p]) if by_prefix else None,
        "busiest_share": round(busiest / total, 3) if total else None,
        "projected_busiest": project(busiest),
    }


def measure_layouts(*, rounds: int, readers: int, busy_s: float, idle_s: float) -> dict[str, Any]:
    """Flat vs spread keys, both with the node share, interleaved ``rounds`` times; medians and spread per side."""
    sides: dict[str, list[dict[str, Any]]] = {"flat": [], "spread": []}
    for i in range(rounds):
        for name, keys in (("flat", FLAT), ("spread", KeyLayout(SPREAD_PREFIXES))):
            r = measure(share=True, readers=readers, busy_s=busy_s, idle_s=idle_s, keys=keys)
            r["spread"] = {w: spread_of(r[w]) for w in ("caught_up", "idle")}
            sides[name].append(r)
            s = r["spread"]
            print(f"round {i + 1} {name:6s}: caught up {r['caught_up']['manifest_requests_per_s']:.2f} req/s/node "
                  f"over {s['caught_up']['prefixes']} prefixes, busiest {s['caught_up']['busiest_prefix']} "
                  f"{s['caught_up']['projected_busiest']['R=8192']['x_prefix_limit']:.3f}x at R=8192; idle over "
                  f"{s['idle']['prefixes']}, busiest {s['idle']['projected_busiest']['R=8192']['x_prefix_limit']:.3f}x",
                  flush=True)
    summary = {}
    for name, runs in sides.items():
        summary[name] = {}
        for w in ("caught_up", "idle"):
            xs = [r["spread"][w]["projected_busiest"]["R=8192"]["x_prefix_limit"] for r in runs]
            ps = [r["spread"][w]["prefixes"] for r in runs]
            total = [r[w]["projected"]["R=8192"]["x_prefix_limit"] for r in runs]
            summary[name][w] = {
                "prefixes_median": statistics.median(ps), "prefixes_range": [min(ps), max(ps)],
                "busiest_x_prefix_limit_R8192_median": statistics.median(xs),
                "busiest_x_prefix_limit_R8192_range": [min(xs), max(xs)],
                "all_manifest_x_prefix_limit_R8192_median": statistics.median(total),
            }
    return {"rounds": rounds, "busy_s": busy_s, "idle_s": idle_s, "readers": readers, "share": True,
            "summary": summary, "runs": sides}


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
    parser.add_argument("--layouts", action="store_true", help="flat vs spread manifest keys (adds 'layouts')")
    parser.add_argument("--rounds", type=int, default=3)
    add_results_arg(parser)
    args = parser.parse_args(argv)
    if args.layouts:
        return _layouts_main(args)
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


def _layouts_main(args: argparse.Namespace) -> int:
    """Measure flat vs spread keys and add them to scale_discovery.json, the other runs left as they are."""
    # 16 s busy at one version per second: every one of the 16 prefixes gets one version in the window
    busy, idle = (8.0, 4.0) if args.quick else (16.0, 8.0)
    layouts = measure_layouts(rounds=args.rounds, readers=args.readers, busy_s=busy, idle_s=idle)
    path = results_dir(args) / "scale_discovery.json"
    import json

    from _common import machine

    existing = json.loads(path.read_text()) if path.exists() else {
        "benchmark": "scale_discovery", "machine": machine(), "s3_prefix_limit": S3_PREFIX_LIMIT,
        "ranks_per_node": RANKS_PER_NODE, "runs": {}}
    existing["layouts"] = {"machine": machine(), **layouts}
    path.write_text(json.dumps(existing, indent=1, default=str))
    print(f"wrote {path} (layouts)", flush=True)
    for name, s in layouts["summary"].items():
        print(name, s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
