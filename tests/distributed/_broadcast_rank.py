"""One torchrun rank of tests/distributed/test_broadcast_torchrun.py: dp=2 x tp=2, one read per TP group.

argv: namespace, phase ("all", "first", "rest", "plain"), state dir. "plain" reads without the broadcast
(every rank reads its slice). Prints ``rank R steps [..] sums [..] requests N`` (N: this rank's store
requests, manifest and data) or ``rank R error <message>``.
"""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist

from torch_tgb import DataLoader, Mesh
from torch_tgb.distributed.broadcast import GroupBroadcast, groups_of
from torch_tgb.storage import LocalStore
from torch_tgb.testing.counting import CountingStore



class Remote(CountingStore):
    """Counted, and read as a remote store would be (range reads, no local mapping)."""

    def local_path(self, key: str) -> str | None:
        return None


ns, phase, state_dir = sys.argv[1], sys.argv[2], sys.argv[3]
dist.init_process_group("gloo")
rank = dist.get_rank()
store = Remote(LocalStore(ns))
mesh = Mesh.from_env(dp=2, tp=2)
group = groups_of(dp=2, tp=2)
inner = DataLoader(store, mesh=mesh, prefetch=2)
loader = inner if phase == "plain" else GroupBroadcast(inner, group=group)
state_path = os.path.join(state_dir, f"rank{rank}.json")
if phase == "rest":
    with open(state_path) as f:
        loader.load_state_dict(json.load(f))
steps, sums = [], []
try:
    for batch in loader:
        steps.append(int(batch["ids"][0, 0]) // 100)
        sums.append(int(batch["ids"].sum()))
        if phase == "first" and len(steps) == 3:
            break
except Exception as e:  # noqa: BLE001 - reported to the test
    print(f"rank {rank} error {type(e).__name__}: {e}", flush=True)
else:
    if phase == "first":
        with open(state_path, "w") as f:
            json.dump(loader.state_dict(), f)
    print(f"rank {rank} steps {steps} sums {sums} requests {store.report()['requests']}", flush=True)
dist.barrier()
dist.destroy_process_group()
