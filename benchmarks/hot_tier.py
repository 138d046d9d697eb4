"""Hot tier (issue 30): the second epoch over a remote namespace, with and without a node-local cache.

One rank of dp=4 reads two epochs of a sealed namespace with one reader;
the second epoch is measured. Readers, side by side in interleaved rounds:

* ``local``: the namespace on this disk (mmap, the local run path): the goal's baseline;
* ``remote``: the same objects behind ``LatencyStore`` (a model: 20 ms RTT,
  100 MB/s per stream), no cache;
* ``remote+tier``: the same remote with ``ReaderOptions(cache_dir=...)``,
  a fresh cache directory per round (the first pass fills it);
* ``remote, 0 ms``: the same objects with no round trip and no cache: the
  bound of the reader's remote read path (prefetch thread, private buffers),
  which a tier hit cannot beat;
* ``s3`` / ``s3+tier`` (``--s3``): a moto S3 server in its own process, smaller.

Reported per reader: range requests that reached the store per rank-step
of the second epoch (``data/`` keys: footers and slices; the goal is <= 0.01
with the tier, from 1.0 without), its tokens/s as a ratio to ``local`` of the
same round (the goal is >= 0.8x), and the requests per rank-step of a new
reader's pass after that (a restarted job or another process of the node:
its footers come from the tier too, or from the store without it).

Usage: python benchmarks/hot_tier.py [--quick] [--s3] [--rounds N] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import torch

import torch_tgb as tgb
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.storage import LatencyStore, LocalStore, ObjectStore, open_store
from torch_tgb.testing.counting import CountingStore

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save, spread  # noqa: E402

DP = 4
MESH = tgb.Mesh(0, DP)
RTT = 0.020


def write(store: ObjectStore | str, steps: int, rows: int, seq: int, options: dict[str, Any] | None = None) -> None:
    layout = tgb.Layout(dp=DP, seq_keys=("input_ids",))
    g = torch.Generator().manual_seed(0)
    with tgb.Producer(store, producer_id="p0", layout=layout, commit_policy="fixed:128",
                      storage_options=options) as p:
        for step in range(steps):
            p.append({"input_ids": torch.randint(0, 50_000, (rows, seq), dtype=torch.int32, generator=g)}, offset=step)
        p.close(seal=True)


def second_epoch(name: str, ns: Any, steps: int, cache: str | None, counter: CountingStore | None,
                 storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One reader of two epochs; the second is measured (the first fills the tier when there is one)."""
    options = ReaderOptions(cache_dir=cache, cache_bytes=1 << 30) if cache else ReaderOptions()
    ds = tgb.TGBDataset(ns, mesh=MESH, epochs=2, options=options, storage_options=storage_options)
    it = iter(ds)
    for _ in range(steps):
        next(it)
    before = counter.range_reads("data/") if counter else 0
    tokens, n, t0 = 0, 0, time.perf_counter()
    for batch in it:
        tokens += batch["input_ids"].numel()
        n += 1
    seconds = time.perf_counter() - t0
    requests = (counter.range_reads("data/") - before) if counter else 0
    assert n == steps, (n, steps)
    return {"reader": name, "steps": n, "tokens_per_s": tokens / seconds, "requests_per_rank_step": requests / n,
            "restart": restart(ns, options, counter, storage_options) if counter else None}


def restart(ns: Any, options: ReaderOptions, counter: CountingStore, storage_options: dict[str, Any] | None) -> float:
    """Range requests per rank-step of a new reader's pass (a restarted job, another process on the node)."""
    before = counter.range_reads("data/")
    n = sum(1 for _ in tgb.TGBDataset(ns, mesh=MESH, options=options, storage_options=storage_options))
    return (counter.range_reads("data/") - before) / n


def measure(readers: dict[str, Any], rounds: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in readers}
    for r in range(rounds):
        names = list(readers) if r % 2 == 0 else list(reversed(readers))
        for name in names:
            out[name].append(readers[name]())
            print(f"round {r} {name}: {out[name][-1]}", flush=True)
    return out


def summarize(runs: dict[str, list[dict[str, Any]]], baseline: str) -> list[dict[str, Any]]:
    rows = []
    for name, results in runs.items():
        ratios = [x["tokens_per_s"] / b["tokens_per_s"] for x, b in zip(results, runs[baseline])]
        rows.append({
            "reader": name,
            "tokens_per_s": spread([x["tokens_per_s"] for x in results]),
            "ratio_to_local": spread(ratios),
            "requests_per_rank_step": spread([x["requests_per_rank_step"] for x in results]),
            "restart_requests_per_rank_step": spread([x["restart"] for x in results if x["restart"] is not None]),
            "steps": results[0]["steps"],
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds (a smoke run)")
    parser.add_argument("--s3", action="store_true", help="also a moto S3 server on loopback (small)")
    parser.add_argument("--rounds", type=int, default=None)
    add_results_arg(parser)
    args = parser.parse_args(argv)
    steps, rows, seq = (16, 16, 512) if args.quick else (512, 32, 2048)
    rounds = args.rounds or (1 if args.quick else 5)
    work = Path(tempfile.mkdtemp(prefix="tgb-hot-tier-"))
    try:
        write(str(work / "ns"), steps, rows, seq)
        remote = CountingStore(LatencyStore(LocalStore(work / "ns"), rtt=RTT, bandwidth=100e6))
        no_rtt = CountingStore(LatencyStore(LocalStore(work / "ns"), rtt=0.0, bandwidth=0))

        def cache() -> str:
            return str(work / f"cache-{uuid.uuid4().hex[:8]}")

        readers = {
            "local": lambda: second_epoch("local", str(work / "ns"), steps, None, None),
            "remote": lambda: second_epoch("remote", remote, steps, None, remote),
            "remote+tier": lambda: second_epoch("remote+tier", remote, steps, cache(), remote),
            "remote, 0 ms": lambda: second_epoch("remote, 0 ms", no_rtt, steps, None, no_rtt),
        }
        runs = measure(readers, rounds)
        result: dict[str, Any] = {
            "model": remote.inner.describe(),
            "config": {"dp": DP, "steps": steps, "rows": rows, "seq": seq, "dtype": "int32",
                       "slice_bytes": rows // DP * seq * 4, "rounds": rounds,
                       "commit": "fixed:128 (one log version per 128 steps)"},
            "results": summarize(runs, "local"),
        }
        if args.s3:
            result["s3"] = s3_section(work, rounds, args.quick)
        save(results_dir(args), "hot_tier", result)
        for row in result["results"] + result.get("s3", {}).get("results", []):
            print(f"{row['reader']:>12}: {row['tokens_per_s']['median'] / 1e6:8.1f} M tok/s, "
                  f"{row['ratio_to_local']['median']:.3f}x local, "
                  f"{row['requests_per_rank_step']['median']:.3f} requests per rank-step "
                  f"(a new reader: {row['restart_requests_per_rank_step']['median']:.3f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def s3_section(work: Path, rounds: int, quick: bool) -> dict[str, Any]:
    """moto in its own process (small: moto serves ~150 small GETs/s on 2 cores)."""
    from torch_tgb.testing.s3server import moto_s3_server

    steps, rows, seq = (16, 16, 512) if quick else (64, 32, 2048)  # the main section's slices, fewer steps
    write(str(work / "s3-local"), steps, rows, seq)
    with moto_s3_server(separate_process=True) as server:
        url, options = server.namespace("hot-tier")
        write(url, steps, rows, seq, options)
        store = CountingStore(open_store(url, options))

        def cache() -> str:
            return str(work / f"cache-{uuid.uuid4().hex[:8]}")

        runs = measure({
            "local(s3 size)": lambda: second_epoch("local(s3 size)", str(work / "s3-local"), steps, None, None),
            "s3": lambda: second_epoch("s3", store, steps, None, store),
            "s3+tier": lambda: second_epoch("s3+tier", store, steps, cache(), store),
        }, rounds)
    return {"config": {"steps": steps, "rows": rows, "seq": seq}, "results": summarize(runs, "local(s3 size)")}


if __name__ == "__main__":
    sys.exit(main())
