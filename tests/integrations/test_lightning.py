"""PyTorch Lightning itself (DDP on 2 CPU processes, its own launcher and checkpoints): exact resume, right slices.

``examples/lightning_train.py`` trains 12 steps on a sealed dp=2 namespace
with ``ModelCheckpoint(every_n_train_steps=5)``, then a second launch resumes
from ``step=5.ckpt`` (a rollback past the stop, with a loader worker this
time) and trains to 16. Lightning fetches one batch ahead of the one it
trains; the checkpoint must still hold cursor 5, and every global step must
train the TGB step of that number, this rank's slice, once per run.
"""

from __future__ import annotations

import sys

import pytest
import torch

from tests.integrations._frameworks import EXAMPLES, batches, check_run, lightning_entry_point_env, run
from torch_tgb.consumer import cursor_of

try:
    import pytorch_lightning  # noqa: F401
except ImportError as e:  # CI installs the [lightning] extra; elsewhere say why nothing ran
    print(f"skipping the Lightning tests: import pytorch_lightning failed: {e}", file=sys.stderr)
    pytest.skip(f"PyTorch Lightning is not installed ({e}): pip install 'torch-tgb[lightning]'", allow_module_level=True)

pytestmark = pytest.mark.slow


def test_resume_from_a_lightning_checkpoint_trains_each_step_once(tmp_path):
    env = lightning_entry_point_env(tmp_path)
    work = tmp_path / "run"
    script = [sys.executable, str(EXAMPLES / "lightning_train.py"), "--workdir", str(work), "--log-batches"]
    run([*script, "--steps", "16", "--stop-after", "12"], env=env)
    first = {rank: batches(work, rank) for rank in (0, 1)}

    ckpt = torch.load(work / "ckpt" / "step=5.ckpt", weights_only=False)
    saved = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert cursor_of(saved).step == 5  # what the fit loop trained, not the batch it had fetched ahead

    for rank in (0, 1):
        (work / f"batches-rank{rank}.jsonl").unlink()
    run([*script, "--steps", "16", "--resume", str(work / "ckpt" / "step=5.ckpt"), "--workers", "1"], env=env)
    for rank in (0, 1):
        check_run(first[rank], rank, range(12))
        check_run(batches(work, rank), rank, range(5, 16))
