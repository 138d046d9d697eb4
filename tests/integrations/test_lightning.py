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

from tests.integrations._frameworks import EXAMPLES, lightning_entry_point_env, require, run, stop_then_resume
from torch_tgb.consumer import cursor_of

require("pytorch_lightning", "pip install 'torch-tgb[lightning]'")

pytestmark = pytest.mark.slow


def test_resume_from_a_lightning_checkpoint_trains_each_step_once(tmp_path):
    env = lightning_entry_point_env(tmp_path)
    work = tmp_path / "run"

    def launch(*args: str) -> None:  # Lightning's own launcher starts the second process
        run([sys.executable, str(EXAMPLES / "lightning_train.py"), *args], env=env)

    stop_then_resume(work, launch, "--resume", str(work / "ckpt" / "step=5.ckpt"), "--workers", "1")
    ckpt = torch.load(work / "ckpt" / "step=5.ckpt", weights_only=False)
    saved = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert cursor_of(saved).step == 5  # what the fit loop trained, not the batch it had fetched ahead
