"""One torchrun rank of tests/lineage/test_excise_torchrun.py.

argv: namespace, phase ("first": read 3 steps, save the state; "rest": resume from it and read to the end),
a directory for the states and the batches read (``<phase>-rank<R>.pt``).
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from torch_tgb import Mesh, TGBDataset

KEYS = ("input_ids", "seq_lens", "provenance")
ns, phase, out = sys.argv[1], sys.argv[2], sys.argv[3]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ds = TGBDataset(ns, mesh=Mesh(rank, world), keys=KEYS, check_consistency=True, prefetch=2)
state_path = os.path.join(out, f"state-rank{rank}.json")
if phase == "rest":
    with open(state_path) as f:
        ds.load_state_dict(json.load(f))
got = []
for batch in ds:
    got.append({k: v.clone() for k, v in batch.items()})
    if phase == "first" and len(got) == 3:
        break
if phase == "first":
    with open(state_path, "w") as f:
        json.dump(ds.state_dict(), f)
torch.save(got, os.path.join(out, f"{phase}-rank{rank}.pt"))
print(f"rank {rank} read {len(got)} view {ds.state_dict()['tgb_source']['replaced']}", flush=True)
dist.barrier()
dist.destroy_process_group()
