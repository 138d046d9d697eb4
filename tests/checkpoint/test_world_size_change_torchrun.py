"""Issue 14 (3): a 2-rank DCP checkpoint resumes on 4 ranks and on 1 with the same DataState(loader)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_tgb as tgb

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
STEPS = 16

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(n: int, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "--master-port", str(free_port()),
         str(HERE / "_world_change_rank.py"), *args],
        env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, f"torchrun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("new_world", [4, 1])
def test_dcp_checkpoint_of_two_ranks_loads_on_a_new_world_size(tmp_path, new_world):
    ns = str(tmp_path / "ns")
    with tgb.Producer(ns, producer_id="p0", layout=tgb.Layout(dp=4), commit_policy="fixed:4") as p:
        for offset in range(STEPS):
            p.append({"x": torch.arange(8).reshape(8, 1) + 100 * offset}, offset=offset)
        p.close(seal=True)
    ckpt, out = str(tmp_path / "ckpt"), tmp_path / "out"
    out.mkdir()
    torchrun(2, ns, ckpt, str(out), "save")
    torchrun(new_world, ns, ckpt, str(out), "load")
    resumed = [torch.load(out / f"rank{r}.pt") for r in range(new_world)]
    assert all(len(r) == STEPS - 6 for r in resumed)  # dp=1/2/4 all read one TGB per step (layout dp=4)
    delivered = torch.cat([torch.cat([resumed[r][s] for r in range(new_world)]) for s in range(STEPS - 6)])
    expected = torch.cat([torch.arange(8).reshape(8, 1) + 100 * offset for offset in range(6, STEPS)])
    assert torch.equal(delivered, expected)  # every batch from step 6 exactly once, in order
