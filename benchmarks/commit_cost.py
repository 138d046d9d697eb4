"""Commit cost and reader cold start versus history length (1k, 10k, 100k committed steps).

Histories are built fast (many entries per version, like a busy producer under
DAC), then measured through a counting wrapper and a latency model:

- commit: one producer commits 1 entry per version, ``--commits`` times;
  latency (median, p90) and store requests per commit;
- reader cold start: a fresh ``Manifest`` answers ``head()`` and ``entry(step)``
  for random steps; store requests and latency.

Targets: commit latency at 100k within 1.2x of 1k; cold-start requests
O(log n). Storage: MemoryStore behind a LatencyStore model (rtt given by
``--rtt-ms``; a 404 is charged one rtt as on S3), and, for commit latency, a
real local directory (LocalStore with fsync).

    python benchmarks/commit_cost.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from torch_tgb.manifest import Committer, Manifest, TGBEntry
from torch_tgb.storage import LatencyStore, LocalStore, MemoryStore, ObjectStore
from torch_tgb.testing.counting import CountingStore

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save


def entry(producer: str, offset: int) -> TGBEntry:
    key = f"data/{producer}/e000001-o{offset:012d}-{uuid.uuid4().hex[:8]}.tgb"
    return TGBEntry(key, 1 << 20, (1 << 20) - 4096, 4072, producer, offset, 64, 131072)


def build_history(store: ObjectStore, steps: int, per_version: int) -> None:
    builder = Committer(Manifest(store), "builder")
    builder.start()
    for start in range(0, steps, per_version):
        n = min(per_version, steps - start)
        result = builder.attempt([entry("builder", o) for o in range(start, start + n)])
        if not result.committed:
            raise RuntimeError(f"history build failed: {result}")


def measure_commits(store: ObjectStore, counting: CountingStore, commits: int) -> dict[str, float]:
    committer = Committer(Manifest(store), "probe")
    committer.start()
    latencies, requests = [], []
    for _ in range(commits):
        counting.reset()
        t0 = time.perf_counter()
        result = committer.attempt([entry("probe", committer.next_offset)])
        latencies.append(time.perf_counter() - t0)
        requests.append(counting.total)
        if not result.committed:
            raise RuntimeError(f"commit failed: {result}")
    latencies.sort()
    return {
        "commit_ms_median": 1e3 * statistics.median(latencies),
        "commit_ms_p90": 1e3 * latencies[int(0.9 * (len(latencies) - 1))],
        "requests_per_commit": statistics.mean(requests),
    }


def measure_cold_start(store: ObjectStore, counting: CountingStore, steps: int, probes: int) -> dict[str, float]:
    rng = random.Random(0)
    head_requests, head_ms, entry_requests, entry_ms = [], [], [], []
    for _ in range(probes):
        counting.reset()
        t0 = time.perf_counter()
        head = Manifest(store).head()
        head_ms.append(time.perf_counter() - t0)
        head_requests.append(counting.total)
        if head.num_steps < steps:
            raise RuntimeError(f"history has {head.num_steps} steps, expected {steps}")
        step = rng.randrange(steps)
        counting.reset()
        t0 = time.perf_counter()
        found = Manifest(store).entry(step)
        entry_ms.append(time.perf_counter() - t0)
        entry_requests.append(counting.total)
        if found.producer != "builder" and found.producer != "probe":
            raise RuntimeError(f"wrong entry for {step=}")
    return {
        "cold_head_requests": statistics.mean(head_requests),
        "cold_head_ms": 1e3 * statistics.median(head_ms),
        "cold_entry_requests": statistics.mean(entry_requests),
        "cold_entry_requests_max": max(entry_requests),
        "cold_entry_ms": 1e3 * statistics.median(entry_ms),
    }


def run(sizes: list[int], per_version: int, commits: int, probes: int, rtt_ms: float) -> dict:
    rows = []
    for steps in sizes:
        base = MemoryStore(f"commit-cost-{uuid.uuid4().hex}")
        t0 = time.perf_counter()
        build_history(base, steps, per_version)
        built_s = time.perf_counter() - t0
        counting = CountingStore(base)
        remote = LatencyStore(counting, rtt=rtt_ms / 1e3, bandwidth=100e6)
        row = {"steps": steps, "versions": Manifest(base).latest_version(), "build_s": built_s}
        row.update({f"remote_{k}": v for k, v in measure_commits(remote, counting, commits).items()})
        row.update({f"memory_{k}": v for k, v in measure_commits(counting, counting, commits).items()})
        row.update(measure_cold_start(remote, counting, steps, probes))
        base.destroy()
        with tempfile.TemporaryDirectory() as tmp:
            local = LocalStore(tmp)
            build_history(local, steps, per_version * 4)
            local_counting = CountingStore(local)
            row.update({f"local_{k}": v for k, v in measure_commits(local_counting, local_counting, commits).items()})
        rows.append(row)
        print(
            f"{steps:>7} steps, {row['versions']:>5} versions | commit: remote {row['remote_commit_ms_median']:.1f} ms "
            f"({row['remote_requests_per_commit']:.1f} req), local dir {row['local_commit_ms_median']:.2f} ms, "
            f"memory {row['memory_commit_ms_median']:.2f} ms | cold start: head {row['cold_head_requests']:.1f} req "
            f"{row['cold_head_ms']:.0f} ms, entry(step) {row['cold_entry_requests']:.1f} req "
            f"(max {row['cold_entry_requests_max']}) {row['cold_entry_ms']:.0f} ms",
            flush=True,
        )
    first, last = rows[0], rows[-1]
    ratios = {
        f"{kind}_commit_ratio_{last['steps']}_vs_{first['steps']}": last[f"{kind}_commit_ms_median"]
        / first[f"{kind}_commit_ms_median"]
        for kind in ("remote", "local", "memory")
    }
    return {
        "model": f"MemoryStore behind LatencyStore rtt={rtt_ms:g} ms, 100 MB/s per stream, 404 charged one rtt; "
        "local = LocalStore (fsync) in a temporary directory",
        "entries_per_version_in_history": per_version,
        "commits_measured": commits,
        "rows": rows,
        "ratios": ratios,
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    steps = [r["steps"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(steps, [r["remote_commit_ms_median"] for r in rows], "o-", label="commit, remote model")
    a.plot(steps, [r["local_commit_ms_median"] for r in rows], "s-", label="commit, local dir (fsync)")
    a.set_xscale("log")
    a.set_xlabel("committed steps")
    a.set_ylabel("median commit latency (ms)")
    a.set_ylim(bottom=0)
    a.legend()
    a.set_title("Commit cost vs history")
    b.plot(steps, [r["cold_entry_requests"] for r in rows], "o-", label="entry(step), mean")
    b.plot(steps, [r["cold_head_requests"] for r in rows], "s-", label="head()")
    b.plot(steps, [r["remote_requests_per_commit"] for r in rows], "^-", label="per commit")
    b.set_xscale("log")
    b.set_xlabel("committed steps")
    b.set_ylabel("store requests")
    b.set_ylim(bottom=0)
    b.legend()
    b.set_title("Requests: cold reader and commit")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller histories and fewer samples")
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    add_results_arg(parser)
    args = parser.parse_args()
    if args.quick:
        result = run([1_000, 10_000, 100_000], per_version=500, commits=10, probes=3, rtt_ms=args.rtt_ms)
    else:
        result = run([1_000, 10_000, 100_000], per_version=100, commits=40, probes=10, rtt_ms=args.rtt_ms)
    out = results_dir(args)
    save(out, "commit_cost", {"quick": args.quick, **result})
    plot(result, out / "commit_cost.png")
    print(json.dumps(result["ratios"], indent=2))


if __name__ == "__main__":
    main()
