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

Then (``peers_s3.json``; ``--no-s3`` skips it, ``--s3-only`` runs only it)
over a loopback S3 server: moto on 127.0.0.1, each S3-capable peer's format
(built from the first ``--s3-tokens`` of the corpus) uploaded and read back
through the peer's own S3 path, 1 rank, passes bounded by batches and
seconds: tokens/s, p50/p95, time to first batch, the server's request count
per batch, and whether the batches equal the local copy's. Peers that take
no endpoint are listed with the reason (``_peers_s3.py``).

Usage: python benchmarks/peers.py [--quick] [--peers builtin|all|a,b] [--no-s3|--s3-only] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from torch_tgb.testing.s3server import DUMMY_AWS_ENV

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, pct, peak_rss_bytes, results_dir, save, spread
from _peers import BATCH_TOKENS, BUILTIN, PEERS, installed
from _peers_s3 import BUCKET, NO_ENDPOINT, S3_PEERS, RequestCounter, probe_get_rate, upload


RESUME_STEP = 10_000  # "time to resume at step 10,000" (issue 19): replaying peers pay for every step skipped


def _digest(batch) -> str:
    return hashlib.blake2b(batch.numpy().tobytes(), digest_size=8).hexdigest()


# --- worker: one peer, one rank, one process ---------------------------------------------------------


def _timed_pass(make_iter, steps: int, max_s: float, *, keep: bool = False) -> tuple[dict[str, Any], list]:
    """Open (``make_iter()``), take the first batch, then up to ``steps`` batches or ``max_s`` seconds."""
    started = time.perf_counter()
    it = make_iter()
    first = next(it)
    ttfb = time.perf_counter() - started
    assert first.shape == (32, 512) and str(first.dtype) == "torch.int64", (first.shape, first.dtype)
    kept = [first] if keep else []
    lat = []
    n = 1
    t0 = time.perf_counter()
    while n < steps and time.perf_counter() - t0 < max_s:
        t = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        lat.append(time.perf_counter() - t)
        n += 1
        if keep:
            kept.append(batch)
    elapsed = time.perf_counter() - t0
    return {"batches": n, "tokens_per_s": (n - 1) * BATCH_TOKENS / elapsed if n > 1 else 0.0,
            "p50_us": pct(lat, 50) * 1e6, "p95_us": pct(lat, 95) * 1e6, "p99_us": pct(lat, 99) * 1e6,
            "ttfb_s": ttfb}, kept


def worker_throughput(peer: str, work: Path, rank: int, world: int, steps: int, max_s: float) -> dict[str, Any]:
    stats, _ = _timed_pass(lambda: PEERS[peer].open(work, rank, world, None)[0], steps, max_s)
    return {"rank": rank, **stats, "peak_rss_mb": peak_rss_bytes() / 2**20}


def worker_s3(peer: str, work: Path, endpoint: str, steps: int, max_s: float) -> dict[str, Any]:
    """One pass over S3 (timed), then the same batches from the local copy by the same loader (not timed)."""
    spec = S3_PEERS[peer]
    with tempfile.TemporaryDirectory(prefix=f"{peer}-cache-", dir=work) as cache:
        stats, batches = _timed_pass(lambda: spec.open(f"s3://{BUCKET}/{spec.directory}", endpoint, Path(cache),
                                                       work / spec.directory), steps, max_s, keep=True)
    it, _ = PEERS[peer].open(work, 0, 1, None)
    local = [_digest(next(it)) for _ in batches]
    return {**stats, "matches_local": local == [_digest(b) for b in batches], "peak_rss_mb": peak_rss_bytes() / 2**20}


def worker_resume(peer: str, work: Path, step: int, check: int) -> dict[str, Any]:
    spec = PEERS[peer]
    # one uninterrupted pass: the state after `step` batches (what a checkpoint holds), then the reference
    it, state_fn = spec.open(work, 0, 1, None)
    for _ in range(step):
        next(it)
    state: Any = step
    if spec.resume == "state_dict":
        assert state_fn is not None, peer
        state = json.loads(json.dumps(state_fn(), default=str)) if peer == "torch_tgb" else state_fn()
    reference = [_digest(next(it)) for _ in range(check)]
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


def _spawn(args: argparse.Namespace, peer: str, world: int, *, mode: str, steps: int, work: Path | None = None,
           endpoint: str = "", max_s: float | None = None) -> list[dict[str, Any]] | str:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if endpoint:
        env.update(DUMMY_AWS_ENV, S3_ENDPOINT_URL=endpoint)
    cmd = [sys.executable, __file__, "--worker", peer, "--work", str(work or args.work), "--world", str(world),
           "--steps", str(steps), "--mode", mode, "--resume-step", str(args.resume_step),
           "--max-seconds", str(args.max_seconds if max_s is None else max_s), "--endpoint", endpoint]
    procs = [subprocess.Popen([*cmd, "--rank", str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for r in range(world)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=args.worker_timeout)
        if p.returncode:
            return f"exit {p.returncode}: {_last_error(stderr)}"
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _last_error(stderr: str) -> str:
    """The exception line of a worker's traceback (its last line may be a library's debug dump)."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line)]
    return (errors or lines or [""])[-1][:300]


def _prepare(names: list[str], work: Path, tokens: np.ndarray, worlds: list[int]) -> dict[str, float | str]:
    """Each peer's format from ``tokens`` under ``work``: seconds taken, or why it failed."""
    tokens.tofile(work / "corpus.bin")
    prep: dict[str, float | str] = {}
    for n in names:
        t = time.perf_counter()
        try:
            PEERS[n].prepare(work, tokens, worlds)
            prep[n] = time.perf_counter() - t
        except Exception as exc:  # noqa: BLE001 - a peer that fails to prepare is reported, not fatal
            prep[n] = f"prepare failed: {type(exc).__name__}: {exc}"
            print(f"{n}: {prep[n]}", flush=True)
    return prep


def corpus_tokens(n: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 50_000, n, dtype=np.uint32)


def selected(args: argparse.Namespace) -> tuple[list[str], dict[str, str | None]]:
    """The peers asked for that import here, and the pip line of those that do not."""
    names = list(BUILTIN) if args.peers == "builtin" else list(PEERS) if args.peers == "all" else args.peers.split(",")
    missing = {n: PEERS[n].pip for n in names if not installed(n)}
    for n, pip in missing.items():
        print(f"{n}: not installed ({pip})", flush=True)
    return [n for n in names if n not in missing], missing


def run(args: argparse.Namespace) -> dict[str, Any]:
    names, missing = selected(args)
    prep = _prepare(names, args.work, corpus_tokens(args.tokens), args.worlds)
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


def run_s3(args: argparse.Namespace) -> dict[str, Any]:
    """The loopback S3 section: upload each S3-capable peer's format to moto, read it back through its S3 path."""
    try:
        import boto3  # noqa: F401 - the uploads and the probe
        import moto
    except ImportError as e:
        return {"skipped": f"the loopback S3 server needs moto: pip install 'moto[server]' ({e})"}
    from torch_tgb.testing.s3server import MotoS3Server

    names, missing = selected(args)
    readers = [n for n in names if n in S3_PEERS]
    work = args.work / "s3"
    work.mkdir()
    prep = _prepare(readers, work, corpus_tokens(args.s3_tokens), [1])
    server = MotoS3Server(BUCKET).start()  # threads of this (otherwise idle) driver process
    counter = RequestCounter().install()  # after start(), which turns werkzeug's request log down
    results: dict[str, Any] = {}
    try:
        got = _spawn(args, "probe", 1, mode="s3probe", steps=0, work=work, endpoint=server.endpoint_url)
        probe = got if isinstance(got, str) else got[0]["gets_per_s"]
        uploaded = {}
        for n in [n for n in readers if not isinstance(prep[n], str)]:
            uploaded[n] = upload(server.endpoint_url, work / S3_PEERS[n].directory, S3_PEERS[n].directory)
        counter.take()
        rows: dict[str, list] = {n: [] for n in uploaded}
        for r in range(args.s3_rounds):
            for n in (list(rows) if r % 2 == 0 else list(reversed(rows))):
                got = _spawn(args, n, 1, mode="s3", steps=args.s3_steps, work=work, endpoint=server.endpoint_url,
                             max_s=args.s3_max_seconds)
                requests = counter.take()
                rows[n].append(got if isinstance(got, str) else {**got[0], "requests": requests})
                print(f"s3 round {r} {n}: " + (got if isinstance(got, str) else
                      f"{got[0]['tokens_per_s'] / 1e6:.2f} M tok/s, {got[0]['batches']} batches, "
                      f"{sum(requests.values())} requests {requests}, matches local {got[0]['matches_local']}"),
                      flush=True)
    finally:
        server.stop()
    for n in readers:
        if isinstance(prep[n], str):
            results[n] = {"how": S3_PEERS[n].how, "errors": [prep[n]]}
            continue
        ok = [g for g in rows[n] if not isinstance(g, str)]
        per_batch = [sum(g["requests"].values()) / g["batches"] for g in ok]
        results[n] = {
            "how": S3_PEERS[n].how, "uploaded_files_bytes": uploaded[n],
            "errors": [g for g in rows[n] if isinstance(g, str)],
            "tokens_per_s": spread([g["tokens_per_s"] for g in ok]),
            "batches": spread([g["batches"] for g in ok]),
            **{k: spread([g[k] for g in ok]) for k in ("p50_us", "p95_us", "ttfb_s")},
            "requests_per_pass": [g["requests"] for g in ok], "requests_per_batch": spread(per_batch),
            "matches_local": all(g["matches_local"] for g in ok) if ok else None,
        }
    return {"peers": results, "no_endpoint": {n: NO_ENDPOINT[n] for n in names if n in NO_ENDPOINT},
            "not_installed": {n: pip for n, pip in missing.items() if n in S3_PEERS}, "tokens": args.s3_tokens,
            "rounds": args.s3_rounds, "max_batches_per_pass": args.s3_steps,
            "max_seconds_per_pass": args.s3_max_seconds, "moto_small_gets_per_s": probe,
            "server": f"moto {moto.__version__} ThreadedMotoServer on 127.0.0.1, threads of the driver process (one "
            "GIL); every pass's reader is its own process with a fresh cache directory",
            "note": "moto is the bottleneck here (one Python process answering every request; "
            "moto_small_gets_per_s is one client's sequential rate of 4 KiB GETs measured in this run): tokens/s "
            "measure the server more than the loaders. Read this section for requests per batch (whole-shard "
            "downloads against range reads) and for correctness: matches_local says every batch read over S3 "
            "equals the batch the same loader reads from its local copy"}


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


def summary_lines_s3(result: dict[str, Any]) -> list[str]:
    if "skipped" in result:
        return [f"s3: skipped: {result['skipped']}"]
    probe = result["moto_small_gets_per_s"]
    lines = [f"s3 (moto: {probe if isinstance(probe, str) else f'{probe:.0f} small GETs/s'}):"]
    for n, r in result["peers"].items():
        if not r.get("tokens_per_s", {}).get("n"):
            lines.append(f"{n:<20} failed: {r['errors']}")
            continue
        lines.append(f"{n:<20} {r['tokens_per_s']['median'] / 1e6:6.2f} M tok/s; p50 {r['p50_us']['median'] / 1e3:.1f} "
                     f"ms, p95 {r['p95_us']['median'] / 1e3:.1f} ms; ttfb {r['ttfb_s']['median'] * 1e3:.0f} ms; "
                     f"{r['requests_per_batch']['median']:.2f} requests/batch; matches local {r['matches_local']}")
    lines += [f"{n:<20} no endpoint: {why}" for n, why in result["no_endpoint"].items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2M tokens, 2 rounds, 1 rank")
    parser.add_argument("--peers", default="all", help="builtin | all | comma list of " + ",".join(PEERS))
    parser.add_argument("--tokens", type=int, default=None,
                        help="corpus size (default: enough for --resume-step plus its check; --quick 2M)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--worlds", default=None, help="rank-process counts, e.g. 1,4")
    parser.add_argument("--resume-step", type=int, default=None,
                        help="resume at this step (default 10,000, the issue's; --quick: a quarter in)")
    parser.add_argument("--max-seconds", type=float, default=4.0, help="stop a rank's pass after this long")
    parser.add_argument("--worker-timeout", type=float, default=600)
    parser.add_argument("--no-s3", dest="s3", action="store_false",
                        help="skip the loopback S3 section (peers_s3.json)")
    parser.add_argument("--s3-only", action="store_true", help="run only the loopback S3 section")
    parser.add_argument("--s3-tokens", type=int, default=None, help="S3 corpus size (default 2M; --quick 1M)")
    parser.add_argument("--s3-rounds", type=int, default=None, help="default 2; --quick 1")
    parser.add_argument("--s3-steps", type=int, default=64, help="batches per S3 pass at most")
    parser.add_argument("--s3-max-seconds", type=float, default=15.0, help="stop an S3 pass after this long")
    parser.add_argument("--endpoint", default="", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="throughput", help=argparse.SUPPRESS)
    add_results_arg(parser)
    args = parser.parse_args(argv)
    if args.worker:
        if args.mode == "s3probe":
            out = {"gets_per_s": probe_get_rate(args.endpoint)}
        elif args.mode == "s3":
            out = worker_s3(args.worker, args.work, args.endpoint, args.steps, args.max_seconds)
        elif args.mode == "resume":
            out = worker_resume(args.worker, args.work, args.resume_step, check=8)
        else:
            out = worker_throughput(args.worker, args.work, args.rank, args.world, args.steps, args.max_seconds)
        print(json.dumps(out))
        return 0
    if args.resume_step is None and not args.quick:
        args.resume_step = RESUME_STEP
    # the corpus covers the resume point and the batches compared after it
    args.tokens = args.tokens or (2 << 20 if args.quick else max(8 << 20, (args.resume_step + 64) * BATCH_TOKENS))
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.worlds = [int(w) for w in (args.worlds or ("1" if args.quick else "1,4")).split(",")]
    args.resume_step = args.resume_step or args.tokens // BATCH_TOKENS // 4
    args.s3_tokens = args.s3_tokens or (1 << 20 if args.quick else 2 << 20)
    args.s3_rounds = args.s3_rounds or (1 if args.quick else 2)
    out_dir = results_dir(args)
    with tempfile.TemporaryDirectory(prefix="tgb-peers-") as tmp:
        args.work = Path(tmp)
        if not args.s3_only:
            started = time.time()
            result = run(args)
            result["elapsed_s"] = time.time() - started
            print("\n".join(summary_lines(result)))
            save(out_dir, "peers", result)
        if args.s3 or args.s3_only:
            started = time.time()
            result = run_s3(args)
            result["elapsed_s"] = time.time() - started
            print("\n".join(summary_lines_s3(result)))
            save(out_dir, "peers_s3", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
