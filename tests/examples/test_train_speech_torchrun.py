"""examples/train_speech_torchrun.py: audio through a producer process, 2 ranks under torchrun, SIGKILL and resume."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import torch_tgb as tgb
from tests.examples.conftest import EXAMPLES

pytestmark = pytest.mark.slow
pytest.importorskip("av")


def _example():
    spec = importlib.util.spec_from_file_location("_tgb_examples_train_speech", EXAMPLES / "train_speech_torchrun.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(EXAMPLES))  # it imports the VLM example's block
    spec.loader.exec_module(module)
    return module


def test_speech_train_killed_then_resumed_replays_the_lost_steps_exactly(tmp_path, run_example):
    common = ["train_speech_torchrun.py", "--workdir", str(tmp_path), "--steps", "5", "--ckpt-every", "2",
              "--clips", "12", "--global-batch", "4", "--seq-len", "96", "--n-mels", "16", "--d-model", "16",
              "--layers", "1", "--producers", "1", "--log-batches"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(EXAMPLES / common[0]), *common[1:], "--kill-after", "3"]
    killed = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TGB_PROGRESS="0", OMP_NUM_THREADS="1"))
    assert killed.returncode != 0 and "killed after step 3" in killed.stdout, killed.stdout[-2000:]
    resumed = run_example(common, torchrun=2)
    assert "resumed from step-000002 at step 2" in resumed.stdout
    assert "trained steps 2..4 on 2 ranks" in resumed.stdout

    example = _example()
    ns = str(tmp_path / "ns")
    for rank in range(2):
        seen = [json.loads(line) for line in (tmp_path / f"batches-rank{rank}.jsonl").read_text().splitlines()]
        assert [s["step"] for s in seen] == [0, 1, 2, 2, 3, 4]  # step 2 was trained, lost with the kill, replayed
        assert seen[2] == seen[3]  # the same batch and the same loss: model, optimizer and data cursor all exact
        ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=2), timeout=30)
        direct = [example.batch_digest(b) for _, b in zip(range(5), ds)]
        last = {s["step"]: s["digest"] for s in seen}
        assert [last[k] for k in range(5)] == direct  # what an uninterrupted reader of this rank's slice gets
