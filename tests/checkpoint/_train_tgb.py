"""A tiny data-parallel training job on TGB data (run under torchrun by test_resume_torchrun).

Each rank reads its DP slice with ``tgb.DataLoader``, trains a linear model
under DDP (gloo), ``dcp.save``s model + optimizer + ``DataState`` every
``--save-every`` steps, and rank 0 records the watermark. Every step appends
``<step> <sha256 of the batch> <loss>`` to ``<out>/<phase>/rank<r>.txt`` so that
runs can be compared batch for batch. ``--kill-at`` ends every rank with
``os._exit`` right after that step (a crash: nothing is flushed or saved);
``--resume a,b`` runs one phase per checkpoint id (load it, train to
``--steps``), logging phase ``i`` under ``<out>/<i>/`` — a restart and a
rollback in one launch (each torchrun launch costs seconds of imports).
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.nn.parallel import DistributedDataParallel

import torch_tgb as tgb
from torch_tgb.checkpoint import DataState, record_watermark
from torch_tgb.layout import Mesh


def digest(batch: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(batch):
        h.update(name.encode())
        h.update(batch[name].contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ns", required=True)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--resume", default="", help="checkpoint ids, comma-separated: one phase each")
    parser.add_argument("--workers", default="0", help="loader workers per phase, comma-separated")
    parser.add_argument("--ckpt-prefix", default="run", help="prefix of checkpoint ids (one namespace, many runs)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    resumes = args.resume.split(",") if args.resume else [""]
    workers = [int(w) for w in args.workers.split(",")]
    for phase, resume in enumerate(resumes):
        out = Path(args.out) / str(phase)
        out.mkdir(parents=True, exist_ok=True)
        train(args, resume=resume, workers=workers[min(phase, len(workers) - 1)], out=out)
    dist.barrier()
    dist.destroy_process_group()


def train(args: argparse.Namespace, *, resume: str, workers: int, out: Path) -> None:
    """Train from scratch or from checkpoint ``resume`` up to ``args.steps``, logging every batch."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = tgb.DataLoader(args.ns, mesh=Mesh(dp_rank=rank, dp_size=world), num_workers=workers, timeout=60)
    progress = {"step": torch.zeros((), dtype=torch.int64)}

    def state() -> dict:
        return {"model": model.state_dict(), "optim": optim.state_dict(), "data": DataState(loader),
                "progress": progress}

    if resume:
        loaded = state()
        dcp.load(loaded, checkpoint_id=str(Path(args.ckpt) / resume))
        model.load_state_dict(loaded["model"])
        optim.load_state_dict(loaded["optim"])
    step = int(progress["step"])

    log = open(out / f"rank{rank}.txt", "a")
    for batch in loader:
        if step >= args.steps:
            break
        loss = torch.nn.functional.mse_loss(model(batch["x"]).squeeze(-1), batch["y"])
        optim.zero_grad()
        loss.backward()
        optim.step()
        log.write(f"{step} {digest(batch)} {loss.item():.8f}\n")
        log.flush()
        step += 1
        if step % args.save_every == 0:
            progress["step"] = torch.tensor(step)
            ckpt_id = f"{args.ckpt_prefix}-step-{step:05d}"
            dcp.save(state(), checkpoint_id=str(Path(args.ckpt) / ckpt_id))
            dist.barrier()  # every rank's shard is durable before the watermark says so
            if rank == 0:
                record_watermark(args.ns, ckpt_id, loader.state_dict())
        if step == args.kill_at:
            log.close()
            os._exit(17)  # a crash: nothing after this point happens
    log.close()


if __name__ == "__main__":
    main()
