"""PyTorch Lightning off the documented path (its DDP launcher, 2 CPU processes): each case exact, or refused.

``lightning_offpath.py`` (beside this file) is what a new user writes: the
Trainer runs by epochs (``max_epochs``, no ``max_steps``), ``ModelCheckpoint``
saves at every epoch end, and every trained or validated batch is logged with
its TGB step and sample ids, so each maps back to its step and slice:

- a run resumed from an epoch-end checkpoint continues at the next step (Lightning
  itself does not restore a loader's state there; it restarted at step 0);
- with ``reload_dataloaders_every_n_epochs`` each new loader continues the old one
  (each epoch trained steps 0..6 again);
- a sealed namespace is a finite dataset: ``max_epochs=3`` trains three passes
  (one pass, then an empty epoch, before), and a TGB validation loader reads the
  whole set at every validation (the sanity check ate its first steps before);
- a validation loader over a stream that is not sealed is refused.
"""

from __future__ import annotations

import sys

import pytest

from tests.integrations._frameworks import (
    DP,
    HERE,
    batches,
    check_steps,
    clear_logs,
    lightning_entry_point_env,
    require,
    run,
)

require("pytorch_lightning", "pip install 'torch-tgb[lightning]'")

pytestmark = pytest.mark.slow


def launch(tmp_path, *args: str, fails: bool = False):
    work = tmp_path / "run"
    cmd = [sys.executable, str(HERE / "lightning_offpath.py"), "--workdir", str(work), *args]
    return work, run(cmd, env=lightning_entry_point_env(tmp_path), fails=fails)


def epochs(records: list[dict]) -> list[int]:
    return [r["epoch"] for r in records]


def validations(work, rank: int) -> dict[int, list[int]]:
    """The TGB steps of each validation run (1: the sanity check) of ``rank``, checked to be its slice."""
    import json

    runs: dict[int, list[int]] = {}
    for line in (work / f"val-rank{rank}.jsonl").read_text().splitlines():
        r = json.loads(line)
        assert r["samples"] == [r["step"] * 1000 + rank * 4 + i for i in range(4)], f"wrong slice: {r}"
        runs.setdefault(r["run"], []).append(r["step"])
    return runs


def test_a_run_resumed_from_an_epoch_end_checkpoint_continues_at_the_next_step(tmp_path):
    work, _ = launch(tmp_path, "--num-steps", "30", "--max-epochs", "2", "--limit", "7")
    for rank in range(DP):
        check_steps(batches(work, rank), rank, list(range(14)))
    clear_logs(work)
    launch(tmp_path, "--num-steps", "30", "--max-epochs", "3", "--limit", "7", "--resume",
           str(work / "ckpt" / "epoch=1.ckpt"))
    for rank in range(DP):
        records = batches(work, rank)
        check_steps(records, rank, list(range(14, 21)))  # was 0..6 again: the state of epoch=1.ckpt was not loaded
        assert epochs(records) == [2] * 7


def test_reloaded_loaders_continue_where_the_old_ones_stopped(tmp_path):
    work, _ = launch(tmp_path, "--num-steps", "20", "--max-epochs", "3", "--limit", "7", "--reload", "--workers", "1")
    for rank in range(DP):
        records = batches(work, rank)
        check_steps(records, rank, list(range(20)))  # was 0..6 three times
        assert epochs(records) == [0] * 7 + [1] * 7 + [2] * 6  # the pass ends at step 20, and so does the epoch


def test_epochs_are_passes_and_validation_reads_the_whole_set_every_time(tmp_path):
    work, _ = launch(tmp_path, "--num-steps", "6", "--max-epochs", "3", "--val")
    for rank in range(DP):
        records = batches(work, rank)
        check_steps(records, rank, list(range(6)) * 3)  # was one pass, then an empty epoch
        assert epochs(records) == [0] * 6 + [1] * 6 + [2] * 6
        # the sanity check reads 2 batches; every validation after it the whole set (was 2..3, then nothing)
        assert validations(work, rank) == {1: [0, 1], 2: [0, 1, 2, 3], 3: [0, 1, 2, 3], 4: [0, 1, 2, 3]}


def test_a_validation_loader_over_an_unsealed_stream_is_refused(tmp_path):
    work, proc = launch(tmp_path, "--num-steps", "6", "--max-epochs", "1", "--val-unsealed", fails=True)
    assert "FrameworkError" in proc.stderr and "not sealed" in proc.stderr
    assert batches(work, 0) == [] and not (work / "val-rank0.jsonl").exists()
