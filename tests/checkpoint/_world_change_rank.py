"""One torchrun rank of the world-size-change test: save with DCP, or load and read the rest.

Usage: torchrun --nproc-per-node N _world_change_rank.py NS CKPT OUT MODE
MODE "save": read 6 steps with dp=N, then ``dcp.save({"data": DataState(loader)})``.
MODE "load": ``dcp.load`` the same structure with dp=N (any N), read to the seal and
write each delivered tensor ``x`` to OUT/rank<r>.pt. Every rank makes the same call.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import torch_tgb as tgb
from torch_tgb.checkpoint import DataState


def main() -> int:
    ns, ckpt, out, mode = sys.argv[1:5]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = tgb.DataLoader(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=world), timeout=60)
    if mode == "save":
        it = iter(loader)
        for _ in range(6):
            next(it)
        dcp.save({"data": DataState(loader)}, checkpoint_id=ckpt)
    else:
        dcp.load({"data": DataState(loader)}, checkpoint_id=ckpt)
        torch.save([b["x"] for b in loader], os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
