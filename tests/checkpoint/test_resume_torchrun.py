"""torchrun, 2 ranks: kill + restart from the newest checkpoint, and roll back to an older one.

Both must replay exactly the batches (and losses) of an uninterrupted run. A
Reclaimer pass between crash and restart shows that what live checkpoints
need survives reclamation.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.checkpoint import Reclaimer, keep_last, live_checkpoints, retire
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store

SCRIPT = Path(__file__).with_name("_train_tgb.py")
STEPS = 24
SAVE_EVERY = 4
KILL_AT = 15  # after the checkpoint at step 12, before the one at 16

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def produce(ns: str, n: int) -> None:
    with tgb.Producer(ns, producer_id="p0", layout=Layout(dp=2), commit_policy="fixed:3") as p:
        for offset in range(n):
            g = torch.Generator().manual_seed(offset)
            p.append({"x": torch.randn(4, 8, generator=g), "y": torch.randn(4, generator=g)})
        p.close(seal=True)


def train(ns: str, ckpt: Path, out: Path, *, run: str, kill_at: int = -1, resume: str = "", workers: str = "0") -> int:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           str(SCRIPT), "--ns", ns, "--ckpt", str(ckpt), "--out", str(out), "--steps", str(STEPS),
           "--save-every", str(SAVE_EVERY), "--kill-at", str(kill_at), "--resume", resume, "--workers", workers, "--ckpt-prefix", run]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    if kill_at < 0 and proc.returncode != 0:
        raise AssertionError(f"training failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.returncode


def records(out: Path, phase: int = 0) -> dict[int, dict[int, tuple[str, str]]]:
    """rank -> step -> (batch digest, loss) of one phase of a run."""
    result = {}
    for rank in (0, 1):
        lines = (out / str(phase) / f"rank{rank}.txt").read_text().split()
        result[rank] = {int(s): (d, l) for s, d, l in zip(lines[::3], lines[1::3], lines[2::3])}
    return result


def test_kill_restart_and_rollback_replay_the_same_batches(tmp_path):
    ns = str(tmp_path / "ns")
    produce(ns, STEPS + 6)

    train(ns, tmp_path / "ck-ref", tmp_path / "ref", run="ref")
    reference = records(tmp_path / "ref")
    assert sorted(reference[0]) == list(range(STEPS))
    assert reference[0][0][0] != reference[1][0][0]  # the two ranks read different DP slices
    assert len(keep_last(ns, 0)) == STEPS // SAVE_EVERY  # the reference run's checkpoints are done with

    # crash after step 15: checkpoints at 4, 8, 12 exist, the newest is step-00012
    ckpt = tmp_path / "ck"
    assert train(ns, ckpt, tmp_path / "crashed", run="a", kill_at=KILL_AT) != 0
    live = [m.checkpoint_id for m in live_checkpoints(ns)]
    assert live == ["a-step-00004", "a-step-00008", "a-step-00012"]
    retire(ns, "a-step-00004")
    report = Reclaimer(ns).run_once()  # steps before the oldest live cursor (8) may go
    assert report.safe_step == 8 and report.objects > 0
    assert Manifest(open_store(ns)).gc_boundary().step <= 8

    # one launch, two phases: restart from the newest checkpoint, then roll back to an older
    # live one (with a loader worker process this time); both replay the reference exactly
    newest = max(live)
    train(ns, ckpt, tmp_path / "resumed", run="b", resume=f"{newest},a-step-00008", workers="0,1")
    for phase, start in ((0, 12), (1, 8)):
        replay = records(tmp_path / "resumed", phase)
        for rank in (0, 1):
            assert sorted(replay[rank]) == list(range(start, STEPS))
            assert replay[rank] == {s: reference[rank][s] for s in range(start, STEPS)}
    assert keep_last(ns, 1)  # the lifecycle policy a trainer would run afterwards
