"""examples/train_gpt_torchrun.py: 2 ranks under torchrun, producers as processes, preempt and resume."""

from __future__ import annotations

import json

import pytest

import torch_tgb as tgb

pytestmark = pytest.mark.slow


def _seen(workdir, rank: int) -> list[dict]:
    return [json.loads(line) for line in (workdir / f"batches-rank{rank}.jsonl").read_text().splitlines()]


def test_train_preempt_resume_sees_every_batch_once(tmp_path, run_example, tiny_gpt):
    common = [
        "train_gpt_torchrun.py", "--workdir", str(tmp_path), "--steps", "6", "--ckpt-every", "2",
        "--global-batch", "4", "--seq-len", "8", "--d-model", "16", "--layers", "1", "--log-batches",
        "--producers", "1",
    ]
    first = run_example([*common, "--stop-after", "4"], torchrun=2)
    assert "stopped after step 4" in first.stdout
    # the printed resume command is literal: this run's arguments without --stop-after
    assert "To resume, run: torchrun --nproc-per-node 2 --standalone " in first.stdout
    assert "--stop-after" not in first.stdout.split("To resume, run:")[1].splitlines()[0]
    again = run_example([*common, "--stop-after", "4"], torchrun=2)  # the same command: says so, trains nothing
    assert "nothing to train: the newest checkpoint is at step 4" in again.stdout
    assert "trained steps" not in again.stdout
    second = run_example([*common, "--stats-interval", "60"], torchrun=2)
    assert "resumed from step-000004 at step 4" in second.stdout
    assert "trained steps 4..5 on 2 ranks" in second.stdout
    # the StatsReporter's final line of each rank, through logging (stderr)
    for rank in range(2):
        assert f"tgb stats consumer rank{rank} ns=" in second.stderr

    ns = str(tmp_path / "ns")
    for rank in range(2):
        seen = _seen(tmp_path, rank)
        assert [s["step"] for s in seen] == list(range(6))  # each step once, across the preemption
        # exactly what an uninterrupted reader of this rank's slice gets
        # (steps below the oldest live checkpoint are reclaimed: compare from there)
        ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=2), timeout=30)
        ds.load_state_dict({"tgb_cursor": {"step": 4, "version": 0}})
        direct = [tiny_gpt.batch_digest(b["input_ids"]) for _, b in zip(range(2), ds)]
        assert [s["digest"] for s in seen[4:]] == direct
    # keep_last(2): only the two newest checkpoints remain on disk
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == ["step-000004", "step-000006"]
