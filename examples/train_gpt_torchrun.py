"""Train a tiny GPT on CPU with torchrun, fed by producer processes through a TGB namespace.

    torchrun --nproc-per-node 2 --standalone examples/train_gpt_torchrun.py --workdir /tmp/run --steps 40

What it shows:

- producers are separate processes (`tgb produce`, started by rank 0 unless
  ``--no-producers``): they write global batches cut for dp = world size;
- each rank reads only its slice with ``tgb.DataLoader(ns, mesh=Mesh.from_env())``;
- every ``--ckpt-every`` steps a DCP checkpoint stores model, optimizer and the
  data cursor (``torch_tgb.checkpoint.DataState``); rank 0 then records the
  watermark, keeps the last 2 checkpoints and runs the Reclaimer;
- the producers write a learnable synthetic stream, so the loss visibly falls;
- ``--stop-after N`` stops after step N as a preemption would and prints the
  command that resumes (the same one without ``--stop-after``): it continues
  from the newest checkpoint with exactly the next steps of the namespace,
  each once (``--log-batches`` writes what each rank saw, per step, so this
  can be checked).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

import torch_tgb as tgb
from torch_tgb.checkpoint import DataState, Reclaimer, keep_last, live_checkpoints, record_watermark
from torch_tgb.observability import StatsReporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tiny_gpt import TinyGPT, batch_digest, lm_loss  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True, help="holds ns/ (unless --ns), checkpoints/ and logs")
    p.add_argument("--ns", default=None, help="namespace URL (default: WORKDIR/ns)")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps in total (default 40)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this step, as if preempted")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every N steps (default 10)")
    p.add_argument("--producers", type=int, default=2, help="producer processes rank 0 starts (default 2)")
    p.add_argument("--no-producers", action="store_true", help="data comes from producers started elsewhere")
    p.add_argument("--global-batch", type=int, default=8, help="sequences per global batch (default 8)")
    p.add_argument("--seq-len", type=int, default=32, help="tokens per sequence (default 32)")
    p.add_argument("--vocab-size", type=int, default=256, help="vocabulary (default 256)")
    p.add_argument("--d-model", type=int, default=32, help="model width (default 32)")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a new step")
    p.add_argument("--log-batches", action="store_true", help="append each rank's batch hashes to WORKDIR/batches-rankR.jsonl")
    p.add_argument("--stats-interval", type=float, default=None, metavar="SECONDS",
                   help="log each rank's loader stats every SECONDS (torch_tgb.observability.StatsReporter)")
    return p.parse_args(argv)


def start_producers(args: argparse.Namespace, ns: str, world: int) -> list[subprocess.Popen]:
    """`tgb produce` processes; rerunning resumes each producer id where it stopped."""
    per = -(-args.steps // args.producers)
    procs = []
    for k in range(args.producers):
        cmd = [
            sys.executable, "-m", "torch_tgb.cli", "produce", ns, "--producer-id", f"p{k}",
            "--steps", str(per), "--global-batch", str(args.global_batch), "--seq-len", str(args.seq_len),
            "--dp", str(world), "--vocab-size", str(args.vocab_size), "--seed", str(k),
        ]
        procs.append(subprocess.Popen(cmd, env=dict(os.environ, TGB_PROGRESS="0")))
    return procs


def newest_checkpoint(ckpt_dir: Path) -> Path | None:
    done = sorted(p for p in ckpt_dir.glob("step-*") if (p / ".metadata").exists())
    return done[-1] if done else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    workdir = Path(args.workdir)
    ns = args.ns or str(workdir / "ns")
    ckpt_dir = workdir / "checkpoints"
    if rank == 0:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
    producers = start_producers(args, ns, world) if rank == 0 and not args.no_producers else []
    torch.manual_seed(0)

    mesh = tgb.Mesh.from_env(dp=world)
    loader = tgb.DataLoader(ns, mesh=mesh, timeout=args.timeout)
    model = DistributedDataParallel(
        TinyGPT(vocab_size=args.vocab_size, seq_len=args.seq_len, d_model=args.d_model, layers=args.layers)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    start = 0
    dist.barrier()
    resume_from = newest_checkpoint(ckpt_dir)
    if resume_from is not None:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd, "data": DataState(loader), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=str(resume_from))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = int(state["step"])
        if rank == 0:
            print(f"resumed from {resume_from.name} at step {start}", flush=True)
    stop = min(args.steps, args.stop_after) if args.stop_after is not None else args.steps
    if start >= stop:  # rerun with the same --stop-after: say so instead of training nothing
        if rank == 0:
            print(f"nothing to train: the newest checkpoint is at step {start} and this run stops at {stop}. "
                  f"To continue, run: {resume_command(world)}", flush=True)
        for proc in producers:
            proc.wait()
        dist.barrier()
        dist.destroy_process_group()
        return 0

    reporter = None
    if args.stats_interval:
        logging.basicConfig(level=logging.INFO, format=f"rank{rank} %(name)s: %(message)s")
        reporter = StatsReporter(interval=args.stats_interval)
        reporter.add(loader, namespace=ns, role="consumer", id=f"rank{rank}")
        reporter.start()
    log = open(workdir / f"batches-rank{rank}.jsonl", "a") if args.log_batches else None
    batches = iter(loader)
    started, tokens, first_loss = time.perf_counter(), 0, None
    for step in range(start, stop):
        batch = next(batches)
        logits = model(batch["input_ids"].long())
        loss = lm_loss(logits, batch["labels"])
        first_loss = loss.item() if first_loss is None else first_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        tokens += batch["input_ids"].numel() * world
        if log is not None:
            log.write(json.dumps({"step": step, "digest": batch_digest(batch["input_ids"])}) + "\n")
            log.flush()
        if rank == 0 and (step % 10 == 0 or step == stop - 1):
            print(f"step {step:5d}  loss {loss.item():.4f}", flush=True)
        if (step + 1) % args.ckpt_every == 0 or step + 1 == stop:
            save_checkpoint(step + 1, model, optimizer, loader, ckpt_dir, ns, rank)
    seconds = time.perf_counter() - started
    if log is not None:
        log.close()
    if reporter is not None:
        reporter.stop()  # logs a final line

    if rank == 0:
        stats = loader.stats() if callable(getattr(loader, "stats", None)) else None
        stall = f", input stall {stats.stall_s:.2f}s" if stats is not None else ""
        print(
            f"trained steps {start}..{stop - 1} on {world} ranks: {tokens / max(seconds, 1e-9):,.0f} tokens/s"
            f"{stall}, loss {first_loss:.4f} -> {loss.item():.4f}",
            flush=True,
        )
        if stop < args.steps:
            print(f"stopped after step {stop} (simulated preemption). To resume, run: {resume_command(world)}",
                  flush=True)
    codes = [proc.wait() for proc in producers]
    failed = [k for k, code in enumerate(codes) if code != 0]
    for k in failed:
        print(f"producer p{k} exited {codes[k]}", file=sys.stderr, flush=True)
    dist.barrier()
    del model  # drop DDP's reducer first: its process group then goes in destroy_process_group, GIL released
    dist.destroy_process_group()
    return 1 if failed else 0


def resume_command(world: int) -> str:
    """This run's own command line without ``--stop-after``: what resumes it from its newest checkpoint."""
    argv, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
        elif arg == "--stop-after":
            skip = True
        elif not arg.startswith("--stop-after="):
            argv.append(arg)
    return shlex.join(["torchrun", "--nproc-per-node", str(world), "--standalone", sys.argv[0], *argv])


def save_checkpoint(step, model, optimizer, loader, ckpt_dir: Path, ns: str, rank: int) -> None:
    """DCP save on every rank, then (rank 0) watermark, keep the last 2, reclaim."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    path = ckpt_dir / f"step-{step:06d}"
    dcp.save(
        {"model": model_sd, "optim": optim_sd, "data": DataState(loader), "step": torch.tensor(step)},
        checkpoint_id=str(path),
    )
    dist.barrier()  # the checkpoint is complete on every rank before it protects anything
    if rank == 0:
        record_watermark(ns, path.name, loader.state_dict())
        keep_last(ns, 2)
        live = {m.checkpoint_id for m in live_checkpoints(ns)}
        for old in ckpt_dir.glob("step-*"):
            if old.name not in live:
                shutil.rmtree(old, ignore_errors=True)
        report = Reclaimer(ns).run_once()
        print(f"checkpoint {path.name}: reclaimed {report.objects} TGB objects, {report.bytes} bytes", flush=True)
    dist.barrier()


if __name__ == "__main__":
    sys.exit(main())
