"""One torchrun rank: read the namespace with check_consistency and verify every tensor.

Usage: python -m torch.distributed.run --nproc-per-node 4 _reader_rank.py NS MODE STEPS
MODE: "env" (Mesh.from_env), "device_mesh" (Mesh.from_device_mesh), "skew" (rank 3
starts one step late: the consistency check must fail). Exits non-zero on any error.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.consumer._support import LAYOUT, make_batch  # noqa: E402
from torch_tgb.consumer import Cursor, DataLoader, TGBDataset  # noqa: E402
from torch_tgb.layout import Mesh  # noqa: E402


def main() -> int:
    ns, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "device_mesh":
        from torch.distributed.device_mesh import init_device_mesh

        mesh = Mesh.from_device_mesh(init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "cp")), dp="dp", cp="cp")
    else:
        mesh = Mesh.from_env(dp=2, cp=2)
    if mode == "loader":
        reader = DataLoader(ns, mesh=mesh, num_workers=2, timeout=60, check_consistency=True)
    else:
        reader = TGBDataset(ns, mesh=mesh, timeout=60, check_consistency=True, prefetch=2)
        if mode == "skew" and rank == 3:
            reader.load_state_dict({"tgb_cursor": Cursor(1).to_json()})
    count = 0
    marker = os.environ.get("TGB_TEST_MARKER")
    for step, batch in enumerate(reader):
        if step == 0 and rank == 0 and marker:
            open(marker, "w").close()  # tells the test's producer that reading has begun
        want = LAYOUT.cut(make_batch(step))[mesh.dp_rank * 2 + mesh.cp_rank].tensors
        for name, t in want.items():
            if not torch.equal(batch[name], t):
                raise SystemExit(f"rank {rank}: wrong data at step={step} tensor {name}")
        count += 1
    if count != steps:
        raise SystemExit(f"rank {rank}: read {count} steps, expected {steps}")
    print(f"rank {rank} mesh {mesh} read {count} steps, all ranks agreed", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
