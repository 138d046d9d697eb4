"""One torchrun rank of tests/distributed/test_skip_torchrun.py: reads with on_corrupt="skip_step".

argv: namespace, phase ("all", "first", "rest"), state dir. Prints one line per rank:
``rank R steps [..] skipped N``. "first" stops after 3 delivered steps and saves its state; "rest"
resumes from it.
"""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist

from torch_tgb import Mesh, TGBDataset

ns, phase, state_dir = sys.argv[1], sys.argv[2], sys.argv[3]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ds = TGBDataset(ns, mesh=Mesh(rank, world), on_corrupt="skip_step", max_skipped=8, prefetch=2)
state_path = os.path.join(state_dir, f"rank{rank}.json")
if phase == "rest":
    with open(state_path) as f:
        ds.load_state_dict(json.load(f))
steps = []
for batch in ds:
    steps.append(int(batch["ids"][0, 0]) // 100)
    if phase == "first" and len(steps) == 3:
        break
if phase == "first":
    with open(state_path, "w") as f:
        json.dump(ds.state_dict(), f)
print(f"rank {rank} steps {steps} skipped {ds.stats().skipped_steps}", flush=True)
dist.barrier()
dist.destroy_process_group()
