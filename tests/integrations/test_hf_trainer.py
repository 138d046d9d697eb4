"""transformers' Trainer (torchrun, 2 CPU processes) with ``get_train_dataloader`` returning ``tgb.DataLoader``.

``examples/hf_trainer_train.py`` trains 12 of 16 steps with a checkpoint every
5, then ``train(resume_from_checkpoint=checkpoint-5)`` trains steps 5..15.
The Trainer keeps no loader state: it resumes by skipping the steps already
trained (accelerate's ``skip_first_batches`` over the TGB dataset, which reads
them again); every global step must still be its own TGB step and this
rank's slice, once per run. The same with loader workers
(``hf_trainer_workers.py``): the skipping loader used to receive the workers'
shared-memory steps and die with ``TypeError: argument of type 'SharedStep' is
not iterable``.
"""

from __future__ import annotations

from functools import partial

import pytest

from tests.integrations._frameworks import HERE, require, stop_then_resume, torchrun

require("transformers", "pip install 'torch-tgb[transformers]'")

pytestmark = pytest.mark.slow


def test_trainer_resume_trains_each_step_once(tmp_path):
    work = tmp_path / "run"
    stop_then_resume(work, partial(torchrun, "hf_trainer_train.py"), "--resume", str(work / "out" / "checkpoint-5"))


def test_trainer_resume_with_loader_workers_trains_each_step_once(tmp_path):
    work = tmp_path / "run"
    stop_then_resume(work, partial(torchrun, HERE / "hf_trainer_workers.py", "--workers", "2"), "--resume",
                     str(work / "out" / "checkpoint-5"))
