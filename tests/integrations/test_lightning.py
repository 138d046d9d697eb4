"""PyTorch Lightning itself (DDP on 2 CPU processes, its own launcher and checkpoints): exact resume, right slices.

``examples/lightning_train.py`` trains 12 steps on a sealed dp=2 namespace
with ``ModelCheckpoint(every_n_train_steps=5)``, then a second launch resumes
from ``step=5.ckpt`` (a rollback past the stop, with a loader worker this
time) and trains on to max_steps=16: the namespace is sealed at 14 steps, so
global steps 14 and 15 are the first two steps of its next pass (a sealed
namespace is a finite dataset, and Lightning's next epoch its next pass). The
checkpoint must hold cursor 5, and every global step must train its TGB step,
this rank's slice, once per run. Off the documented path, see
``test_lightning_offpath.py``.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from tests.consumer._support import produce
from tests.integrations._frameworks import EXAMPLES, lightning_entry_point_env, require, run, stop_then_resume
from torch_tgb import DataLoader
from torch_tgb.consumer import cursor_of
from torch_tgb.layout import Layout, Mesh

require("pytorch_lightning", "pip install 'torch-tgb[lightning]'")

from torch_tgb.integrations.lightning import ConsumedBatches, pytorch_lightning_callbacks  # noqa: E402


def test_the_callback_acts_once_when_registered_twice_and_stops_after_an_empty_epoch(tmp_path):
    """Entry point plus callbacks=[ConsumedBatches()] (or two metadata copies): one acknowledgement per batch."""
    ns = str(tmp_path / "ns")
    produce(ns, 3, layout=Layout(dp=2))
    loader = DataLoader(ns, mesh=Mesh(0, 2), stop_step=3)  # a stream that ends for good at step 3
    trainer = SimpleNamespace(callbacks=[*pytorch_lightning_callbacks(), ConsumedBatches()], train_dataloader=loader,
                              should_stop=False)
    it = iter(loader)
    held = next(it)  # the fit loop's prefetch, before any hook
    for hook in ("on_train_start", "on_train_epoch_start"):
        for cb in trainer.callbacks:
            getattr(cb, hook)(trainer, None)
    for step in range(3):
        nxt = next(it, None)  # fetched ahead, then `held` is trained
        for cb in trainer.callbacks:
            cb.on_train_batch_end(trainer, None, None, held, step)
        assert cursor_of(loader.state_dict()).step == step + 1
        held = nxt
    for cb in trainer.callbacks:
        cb.on_train_epoch_end(trainer, None)
    assert not trainer.should_stop  # an epoch with batches
    for cb in trainer.callbacks:
        cb.on_train_epoch_start(trainer, None)
    with pytest.warns(UserWarning, match="ended at stop_step=3"):
        assert list(loader) == []  # the stream ended at stop_step: the next epoch is empty
    for cb in trainer.callbacks:
        cb.on_train_epoch_end(trainer, None)
    assert trainer.should_stop


@pytest.mark.slow
def test_resume_from_a_lightning_checkpoint_trains_each_step_once(tmp_path):
    env = lightning_entry_point_env(tmp_path)
    work = tmp_path / "run"

    def launch(*args: str) -> None:  # Lightning's own launcher starts the second process
        run([sys.executable, str(EXAMPLES / "lightning_train.py"), "--num-steps", "14", *args], env=env)

    # the namespace is sealed at 14 steps, before max_steps=16: the resumed run goes on with its next pass
    stop_then_resume(work, launch, "--resume", str(work / "ckpt" / "step=5.ckpt"), "--workers", "1", pass_steps=14)
    ckpt = torch.load(work / "ckpt" / "step=5.ckpt", weights_only=False)
    saved = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert cursor_of(saved).step == 5  # what the fit loop trained, not the batch it had fetched ahead
