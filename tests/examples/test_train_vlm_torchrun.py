"""examples/train_vlm_torchrun.py: images through producer processes, 2 ranks under torchrun, preempt and resume."""

from __future__ import annotations

import importlib.util
import json

import pytest

import torch_tgb as tgb
from tests.examples.conftest import EXAMPLES

pytestmark = pytest.mark.slow
pytest.importorskip("PIL")


def _example():
    spec = importlib.util.spec_from_file_location("_tgb_examples_train_vlm", EXAMPLES / "train_vlm_torchrun.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vlm_train_preempt_resume_sees_every_batch_once(tmp_path, run_example):
    common = ["train_vlm_torchrun.py", "--workdir", str(tmp_path), "--steps", "6", "--ckpt-every", "3",
              "--images", "24", "--global-batch", "4", "--seq-len", "96", "--max-pixels", "3136", "--d-model", "16",
              "--layers", "1", "--log-batches"]
    first = run_example([*common, "--stop-after", "3"], torchrun=2)
    assert "stopped after step 3" in first.stdout and "To resume, run: torchrun" in first.stdout
    second = run_example(common, torchrun=2)
    assert "resumed from step-000003 at step 3" in second.stdout
    assert "trained steps 3..5 on 2 ranks" in second.stdout

    example = _example()
    ns = str(tmp_path / "ns")
    for rank in range(2):
        seen = [json.loads(line) for line in (tmp_path / f"batches-rank{rank}.jsonl").read_text().splitlines()]
        assert [s["step"] for s in seen] == list(range(6))  # each step once, across the preemption
        ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=2), timeout=30)
        direct = [example.batch_digest(b) for _, b in zip(range(6), ds)]
        assert [s["digest"] for s in seen] == direct  # exactly what an uninterrupted reader of the slice gets
