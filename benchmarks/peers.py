"""Peers: one pre-tokenised corpus through torch_tgb and the loaders people use, side by side.

Same uint32 corpus, same batch (32x512 delivered as int64), every loader in
its own fresh process, rounds interleaved A B A B so that the shared
machine's load hits every loader alike. Per loader and world size (1 and 4
rank processes): tokens/s, p50/p95/p99 per batch, time to first batch (from
construction), peak RSS per rank; min/median/max over rounds and the ratio
to the raw memmap floor measured in the same round. Then resume at step N:
construct + load state + first batch, and whether the next batches equal the
uninterrupted run. A peer that is not importable is reported "not installed"
with its pip line. The peers and how each is read: ``_peers.py``.

Usage: python benchmarks/peers.py [--quick] [--peers builtin|all|a,b] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, pct, peak_rss_bytes, results_dir, save, spread
from _peers import BATCH_TOKENS, BUILTIN, PEERS, installed


def _digest(batch) -> str:
    return hashlib.blake2b(batch.numpy().tobytes(), digest_size=8).hexdigest()


# --- worker: one peer, one rank, one process ---------------------------------------------------------


def worker_throughput(peer: str, work: Path, rank: int, world: int, steps: int, max_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    it, _ = PEERS[peer].open(work, rank, world, None)
    first = next(it)
    ttfb = time.perf_counter() - started
    assert first.shape == (32, 512) and str(first.dtype) == "torch.int64", (first.shape, first.dtype)
    lat = []
    n = 1
    t0 = time.perf_counter()
    while n < steps and time.perf_counter() - t0 < max_s:
        t = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            break
        lat.append(time.perf_counter() - t)
        n += 1
    elapsed = time.perf_counter() - t0
    return {"rank": rank, "batches": n, "tokens_per_s": (n - 1) * BATCH_TOKENS / elapsed if n > 1 else 0.0,
            "p50_us": pct(lat, 50) * 1e6, "p95_us": pct(lat, 95) * 1e6, "p99_us": pct(lat, 99) * 1e6,
            "ttfb_s": ttfb, "peak_rss_mb": peak_rss_bytes() / 2**20}


def worker_resume(peer: str, work: Path, step: int, check: int) -> dict[str, Any]:
    spec = PEERS[peer]
    it, _ = spec.open(work, 0, 1, None)
    reference = [_digest(next(it)) for _ in range(step + check)][step:]
    state = step
    if spec.resume == "state_dict":
        it, state_fn = spec.open(work, 0, 1, None)
        for _ in range(step):
            next(it)
        state = json.loads(json.dumps(state_fn(), default=str)) if peer == "torch_tgb" else state_fn()
    started = time.perf_counter()
    if spec.resume == "replay":
        it, _ = spec.open(work, 0, 1, None)
        for _ in range(step):
            next(it)
    else:
        it, _ = spec.open(work, 0, 1, state)
    first = next(it)
    resume_s = time.perf_counter() - started
    after = [_digest(first)] + [_digest(next(it)) for _ in range(check - 1)]
    return {"method": spec.resume, "resume_s": resume_s, "step": step, "checked_batches": check,
            "exact": after == reference}


# --- driver ------------------------------------------------------------------------------------------


def _spawn(args: argparse.Namespace, peer: str, world: int, *, mode: str, steps: int) -> list[dict[str, Any]] | str:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    cmd = [sys.executable, __file__, "--worker", peer, "--work", str(args.work), "--world", str(world),
           "--steps", str(steps), "--mode", mode, "--resume-step", str(args.resume_step),
           "--max-seconds", str(args.max_seconds)]
    procs = [subprocess.Popen([*cmd, "--rank", str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for r in range(world)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=args.worker_timeout)
        if p.returncode:
            return f"exit {p.returncode}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}"
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    names = list(BUILTIN) if args.peers == "builtin" else list(PEERS) if args.peers == "all" else args.peers.split(",")
    missing = {n: PEERS[n].pip for n in names if not installed(n)}
    for n, pip in missing.items():
        print(f"{n}: not installed ({pip})", flush=True)
    names = [n for n in names if n not in missing]
    work = args.work
    tokens = np.random.default_rng(0).integers(0, 50_000, args.tokens, dtype=np.uint32)
    tokens.tofile(work / "corpus.bin")
    prep = {}
    for n in names:
        t = time.perf_counter()
        try:
            PEERS[n].prepare(work, tokens, args.worlds)
            prep[n] = time.perf_counter() - t
        except Exception as exc:  # noqa: BLE001 - a peer that fails to prepare is reported, not fatal
            prep[n] = f"prepare failed: {type(exc).__name__}: {exc}"
            print(f"{n}: {prep[n]}", flush=True)
    names = [n for n in names if not isinstance(prep[n], str)]
    steps = args.tokens // BATCH_TOKENS
    rows: dict[str, dict[int, list]] = {n: {w: [] for w in args.worlds} for n in names}
    for r in range(args.rounds):
        order = names if r % 2 == 0 else list(reversed(names))
        for world in args.worlds:
            for n in order:
                got = _spawn(args, n, world, mode="throughput", steps=steps // world)
                rows[n][world].append(got)
                if isinstance(got, str):
                    print(f"round {r} {n} x{world}: {got}", flush=True)
                else:
                    print(f"round {r} {n} x{world}: " + ", ".join(f"{g['tokens_per_s'] / 1e6:.1f}" for g in got)
                          + " M tok/s per rank", flush=True)
    results: dict[str, Any] = {}
    for n in names:
        per_world = {}
        for world in args.worlds:
            ok = [g for g in rows[n][world] if not isinstance(g, str)]
            errors = [g for g in rows[n][world] if isinstance(g, str)]
            floor_rounds = [g for g in rows.get("floor", {}).get(world, []) if not isinstance(g, str)]
            ratios = [sum(x["tokens_per_s"] for x in g) / sum(x["tokens_per_s"] for x in f)
                      for g, f in zip(ok, floor_rounds)] if floor_rounds and len(ok) == len(floor_rounds) else []
            per_rank = [x for g in ok for x in g]
            per_world[str(world)] = {
                "errors": errors,
                "tokens_per_s_total": spread([sum(x["tokens_per_s"] for x in g) for g in ok]),
                "tokens_per_s_per_rank": spread([x["tokens_per_s"] for x in per_rank]),
                "ratio_to_floor": spread(ratios),
                **{k: spread([x[k] for x in per_rank]) for k in ("p50_us", "p95_us", "p99_us", "ttfb_s",
                                                                  "peak_rss_mb")},
            }
        got = _spawn(args, n, 1, mode="resume", steps=0)
        resume = got if isinstance(got, str) else got[0]
        print(f"{n}: resume {resume}", flush=True)
        results[n] = {"note": PEERS[n].note, "prepare_s": prep[n], "worlds": per_world, "resume": resume}
    return {"peers": results, "not_installed": missing, "tokens": args.tokens, "batch": [32, 512],
            "corpus_dtype": "uint32", "delivered_dtype": "int64", "rounds": args.rounds, "worlds": args.worlds,
            "resume_step": args.resume_step, "max_seconds_per_pass": args.max_seconds,
            "partitioning": "floor, DataLoader, StatefulDataLoader: batch b to rank b % world; torch_tgb: a dp=world "
            "namespace; WebDataset: shards[rank::world]; Streaming and LitData: each rank process reads the whole "
            "stream (no process group is started, so they see world 1): per-rank throughput only"}


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for n, r in result["peers"].items():
        for world, w in r["worlds"].items():
            t, q = w["tokens_per_s_per_rank"], w["ratio_to_floor"]
            lines.append(f"{n:<20} x{world}: {t['median'] / 1e6:8.1f} M tok/s/rank (min {t['min'] / 1e6:.1f}, max "
                         f"{t['max'] / 1e6:.1f}); floor ratio {q['median']:.3f}; p50 {w['p50_us']['median']:.0f} us, "
                         f"p99 {w['p99_us']['median']:.0f} us; ttfb {w['ttfb_s']['median'] * 1e3:.0f} ms; "
                         f"rss {w['peak_rss_mb']['median']:.0f} MB")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2M tokens, 2 rounds, 1 rank")
    parser.add_argument("--peers", default="all", help="builtin | all | comma list of " + ",".join(PEERS))
    parser.add_argument("--tokens", type=int, default=None, help="corpus size (default 8M; --quick 2M)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--worlds", default=None, help="rank-process counts, e.g. 1,4")
    parser.add_argument("--resume-step", type=int, default=None, help="resume at this step (default: a quarter in)")
    parser.add_argument("--max-seconds", type=float, default=4.0, help="stop a rank's pass after this long")
    parser.add_argument("--worker-timeout", type=float, default=600)
    parser.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="throughput", help=argparse.SUPPRESS)
    add_results_arg(parser)
    args = parser.parse_args(argv)
    if args.worker:
        if args.mode == "resume":
            out = worker_resume(args.worker, args.work, args.resume_step, check=8)
        else:
            out = worker_throughput(args.worker, args.work, args.rank, args.world, args.steps, args.max_seconds)
        print(json.dumps(out))
        return 0
    args.tokens = args.tokens or (2 << 20 if args.quick else 8 << 20)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.worlds = [int(w) for w in (args.worlds or ("1" if args.quick else "1,4")).split(",")]
    args.resume_step = args.resume_step or args.tokens // BATCH_TOKENS // 4
    out_dir = results_dir(args)
    with tempfile.TemporaryDirectory(prefix="tgb-peers-") as tmp:
        args.work = Path(tmp)
        started = time.time()
        result = run(args)
        result["elapsed_s"] = time.time() - started
    print("\n".join(summary_lines(result)))
    save(out_dir, "peers", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
