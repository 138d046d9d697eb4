"""Checkpoint-driven storage reclamation (BatchWeave §7.5 / Figure 9 analogue).

Two otherwise identical runs over a local-directory namespace: producers
(threads, real ``Producer`` with ``max_lag``) write TGBs; a trainer reads
them with ``TGBDataset``, "computes" for ``--step-ms`` per step, and every
``--ckpt-every`` steps records a watermark for a new checkpoint and retires
the previous one (``keep_last(1)``). With reclamation the trainer then runs
``Reclaimer.run_once()``; without it nothing is ever deleted. Stored bytes
(everything under the namespace: TGBs and metadata) are sampled every
``--sample-every`` steps and just before each reclamation pass.

Expected: linear growth without reclamation; with it a plateau bounded by
about ``ckpt_every + max_lag`` TGBs (producers may run ``max_lag`` steps past
the oldest live checkpoint, which is at most ``ckpt_every`` behind the trainer).
The Reclaimer frees whole manifest versions, so a policy that batches many
TGBs per version (DAC) keeps up to one version more; ``--also-policy naive``
(one TGB per version) shows the bound without that alignment.

Run:  python benchmarks/lifecycle.py            (1,010 steps, 256 KiB TGBs)
      python benchmarks/lifecycle.py --small    (quick check)
Writes benchmarks/results/lifecycle.json and lifecycle.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from torch_tgb.checkpoint import Reclaimer, keep_last, record_watermark
from torch_tgb.consumer import TGBDataset
from torch_tgb.layout import Layout, Mesh
from torch_tgb.producer import Producer
from torch_tgb.producer.config import ProducerConfig
from torch_tgb.storage import LocalStore

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save

MIB = 1024 * 1024


def stored_bytes(root: str) -> tuple[int, int]:
    """(bytes, files) of every file under ``root``."""
    total = files = 0
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_size
                        files += 1
                except FileNotFoundError:  # a temporary file renamed or deleted while we walk
                    continue
    return total, files


def run(args: argparse.Namespace, *, reclaim: bool, policy: str) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix=f"tgb-lifecycle-{'on' if reclaim else 'off'}-")
    store = LocalStore(root, fsync=False)
    rows = args.tgb_bytes // 1024
    per_producer = -(-args.steps // args.producers)
    producers = [
        Producer(store, producer_id=f"p{i}", layout=Layout(dp=1), commit_policy=policy, max_lag=args.max_lag,
                 config=ProducerConfig(lag_poll_s=0.01, lag_poll_max_s=0.01))
        for i in range(args.producers)
    ]

    def produce(p: Producer, seed: int) -> None:
        for offset in range(per_producer):
            p.append({"x": torch.full((rows, 1024), (seed + offset) % 251, dtype=torch.uint8)})
        p.close()

    threads = [threading.Thread(target=produce, args=(p, i), daemon=True) for i, p in enumerate(producers)]
    started = time.monotonic()
    for t in threads:
        t.start()

    samples: list[dict[str, Any]] = []

    def sample(step: int, event: str) -> None:
        nbytes, files = stored_bytes(root)
        samples.append({"step": step, "t": round(time.monotonic() - started, 4), "bytes": nbytes, "files": files,
                        "event": event})

    reclaimer = Reclaimer(store)
    reports = []
    dataset = TGBDataset(store, mesh=Mesh(dp_rank=0, dp_size=1), timeout=120, prefetch=2)
    step = 0
    sample(0, "start")
    for _batch in dataset:
        time.sleep(args.step_ms / 1000)
        step += 1
        if step % args.ckpt_every == 0:
            # the checkpoint (model etc.) is durable here; record its cursor, delete the previous one
            record_watermark(store, f"step-{step:06d}", dataset.state_dict())
            keep_last(store, 1)
            if reclaim:
                sample(step, "before_reclaim")
                reports.append(reclaimer.run_once().to_json())
        if step % args.sample_every == 0 or step % args.ckpt_every == 0:
            sample(step, "step")
        if step >= args.steps:
            break
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - started
    final_bytes, final_files = stored_bytes(root)
    paused = sum(p.stats().paused_for_lag_s for p in producers)
    peak = max(s["bytes"] for s in samples)
    steady = [s["bytes"] for s in samples if s["step"] >= args.steps // 2]
    result = {
        "reclaim": reclaim,
        "policy": policy,
        "steps": step,
        "seconds": round(elapsed, 2),
        "peak_bytes": peak,
        "peak_tgbs": round(peak / args.tgb_bytes, 1),
        "final_bytes": final_bytes,
        "final_files": final_files,
        "steady_mean_bytes": int(sum(steady) / max(1, len(steady))),
        "producer_paused_for_lag_s": round(paused, 2),
        "objects_reclaimed": sum(r["objects"] for r in reports),
        "versions_reclaimed": sum(r["versions"] for r in reports),
        "bytes_reclaimed": sum(r["bytes"] for r in reports),
        "reclaim_pass_mean_ms": round(1000 * sum(r["seconds"] for r in reports) / max(1, len(reports)), 2),
        "samples": samples,
    }
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    return result


def plot(results: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        xs = [s["step"] for s in r["samples"]]
        ys = [s["bytes"] / MIB for s in r["samples"]]
        label = f"with reclamation, {r['policy']}" if r["reclaim"] else "without reclamation"
        style = "-" if r["policy"] == args.policy else "--"
        ax.plot(xs, ys, style, label=f"{label} (peak {r['peak_bytes'] / MIB:.1f} MiB)", drawstyle="steps-post")
    bound = (args.ckpt_every + args.max_lag) * args.tgb_bytes / MIB
    ax.axhline(bound, color="gray", linestyle=":", label=f"(ckpt interval + max_lag) TGBs = {bound:.0f} MiB")
    ax.set_xlabel("training step")
    ax.set_ylabel("stored bytes (MiB)")
    ax.set_title(f"{args.steps} steps, checkpoint every {args.ckpt_every}, max_lag={args.max_lag}, "
                 f"{args.tgb_bytes // 1024} KiB TGBs")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1010)
    parser.add_argument("--ckpt-every", type=int, default=10)
    parser.add_argument("--max-lag", type=int, default=80)
    parser.add_argument("--tgb-bytes", type=int, default=256 * 1024)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--policy", default="dac")
    parser.add_argument("--also-policy", default="naive",
                        help="a second commit policy run with reclamation ('' to skip): one TGB per version "
                             "shows the bound without version alignment")
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--sample-every", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="210 steps of 64 KiB (a quick check)")
    add_results_arg(parser)
    args = parser.parse_args()
    if args.small:
        args.steps, args.tgb_bytes = 210, 64 * 1024

    results = [run(args, reclaim=False, policy=args.policy), run(args, reclaim=True, policy=args.policy)]
    if args.also_policy:
        results.append(run(args, reclaim=True, policy=args.also_policy))
    off, on = results[:2]
    summary = {
        "config": {k: getattr(args, k) for k in ("steps", "ckpt_every", "max_lag", "tgb_bytes", "producers", "policy",
                                                 "step_ms")},
        "bound_bytes": (args.ckpt_every + args.max_lag) * args.tgb_bytes,
        "peak_reduction": round(1 - on["peak_bytes"] / off["peak_bytes"], 4),
        "final_reduction": round(1 - on["final_bytes"] / off["final_bytes"], 4),
        "paper": {"without_gib": 34.85, "with_gib": 9.76, "reduction": 0.72},
        "runs": results,
    }
    out = results_dir(args)
    save(out, "lifecycle", summary)
    plot(results, args, out / "lifecycle.png")
    for r in results:
        print(f"reclaim={r['reclaim']!s:5} {r['policy']:6} peak {r['peak_bytes'] / MIB:8.1f} MiB ({r['peak_tgbs']} TGBs)  "
              f"final {r['final_bytes'] / MIB:8.1f} MiB  steady mean {r['steady_mean_bytes'] / MIB:8.1f} MiB  "
              f"paused {r['producer_paused_for_lag_s']} s  {r['seconds']} s")
    print(f"bound (ckpt_every + max_lag) TGBs = {summary['bound_bytes'] / MIB:.1f} MiB; "
          f"peak reduction {summary['peak_reduction']:.1%} (paper: 72.0%)")
    print("peak TGBs with reclamation: " + ", ".join(f"{r['policy']} {r['peak_tgbs']}" for r in results if r["reclaim"])
          + f" (bound {args.ckpt_every + args.max_lag})")


if __name__ == "__main__":
    main()
