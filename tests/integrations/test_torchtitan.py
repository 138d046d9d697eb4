"""torchtitan's loader contract and CheckpointManager (torchrun, 2 CPU processes): exact resume, any dp degree.

torchtitan's Trainer needs CUDA, so ``examples/torchtitan_train.py`` runs its
pieces as ``Trainer.train`` does: the loader built from
``TGBDataLoader.Config`` with the trainer's arguments, torchtitan's optimizer
and LR scheduler containers and its DCP ``CheckpointManager``. 12 steps with a
checkpoint every 5, then ``load(step=5)`` and on to 16; then one process loads
``step-10`` (dp 2 -> 1: torchtitan's own loader refuses another dp degree) and
reads whole global batches from step 10.
"""

from __future__ import annotations

from functools import partial

import pytest

from tests.integrations._frameworks import batches, check_run, clear_logs, require, stop_then_resume, torchrun

require("torchtitan", "pip install 'torch-tgb[torchtitan]' && pip install --no-deps torchtitan==0.3.0")

pytestmark = pytest.mark.slow


def test_checkpoint_manager_resumes_each_step_once_also_on_another_dp_degree(tmp_path):
    work = tmp_path / "run"
    stop_then_resume(work, partial(torchrun, "torchtitan_train.py"), "--load-step", "5")
    clear_logs(work)
    torchrun("torchtitan_train.py", "--workdir", str(work), "--log-batches", "--load-step", "10", "--steps", "14",
             nproc=1)
    check_run(batches(work, 0), 0, range(10, 14), dp=1)
