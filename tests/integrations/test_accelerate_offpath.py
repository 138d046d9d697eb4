"""HF accelerate off the documented path (torchrun, 2 CPU processes): refused before the first wrong batch.

``accelerate_offpath.py`` (beside this file) hands ``accelerator.prepare`` what a
new user might: a torch ``DataLoader`` (or torchdata ``StatefulDataLoader``) over
``tgb.TGBDataset`` instead of a ``tgb.DataLoader``. accelerate rebuilds it: with
dispatching, process 0 read every batch and rank 0 trained steps 0, 2, 4 ... and
rank 1 steps 1, 3, 5 ... both of slice 0; with ``dispatch_batches=False`` it failed
with ``TypeError: 'NoneType' * 'int'``. And after ``load_state`` accelerate's
checkpoint guide calls ``skip_first_batches(loader, step)``, which skipped the
restored steps a second time (resumed at 5, it trained 10..14). Each is now a
``FrameworkError`` on every rank, naming the fix, before any batch is trained.
"""

from __future__ import annotations

import pytest

from tests.integrations._frameworks import DP, HERE, batches, check_steps, require, torchrun

require("accelerate", "pip install 'torch-tgb[accelerate]'")

pytestmark = pytest.mark.slow

SCRIPT = HERE / "accelerate_offpath.py"


def refused(work, *needles: str) -> None:
    for rank in range(DP):
        error = (work / f"error-rank{rank}.txt").read_text()
        assert error.startswith("FrameworkError") and all(n in error for n in needles), error
        assert batches(work, rank) == []  # nothing was trained


@pytest.mark.parametrize("mode", ["plain", "stateful", "no-dispatch"])
def test_prepare_of_a_torch_loader_over_a_tgb_dataset_is_refused(tmp_path, mode):
    work = tmp_path / "run"
    torchrun(SCRIPT, "--workdir", str(work), "--mode", mode, fails=True)
    refused(work, "Pass a tgb.DataLoader to accelerator.prepare",
            "IterableDatasetShard" if mode == "no-dispatch" else "DataLoaderDispatcher")


def test_skip_first_batches_after_load_state_is_refused(tmp_path):
    work = tmp_path / "run"
    torchrun(SCRIPT, "--workdir", str(work), "--mode", "skip", "--steps", "6")
    for rank in range(DP):
        check_steps(batches(work, rank), rank, list(range(6)))
        (work / f"batches-rank{rank}.jsonl").unlink()
    torchrun(SCRIPT, "--workdir", str(work), "--mode", "skip", "--steps", "10", "--resume",
             str(work / "ckpt" / "step_5"), "--workers", "1", fails=True)
    refused(work, "skip_first_batches", "continues at step 5")
