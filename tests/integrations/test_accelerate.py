"""HF accelerate itself (torchrun, 2 CPU processes): prepare keeps the loader, save_state/load_state resume exactly.

``examples/accelerate_train.py`` passes a ``tgb.DataLoader`` through
``accelerator.prepare`` (which must return it unchanged: no re-sharding, no
dispatch from process 0), trains 12 steps with ``save_state`` every 5, then a
second launch ``load_state``s ``step_5`` (a rollback past the stop, with a
loader worker this time) and trains to 16. Every step must be the TGB step of
that number, this rank's slice, once per run.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

from tests.integrations._frameworks import require, stop_then_resume, torchrun
from torch_tgb.consumer import cursor_of

require("accelerate", "pip install 'torch-tgb[accelerate]'")

pytestmark = pytest.mark.slow


def test_prepare_save_state_load_state_train_each_step_once(tmp_path):
    work = tmp_path / "run"
    stop_then_resume(work, partial(torchrun, "accelerate_train.py"), "--resume", str(work / "ckpt" / "step_5"),
                     "--workers", "1")
    # one file written by both processes: the rank-independent position after 5 trained steps
    state = torch.load(work / "ckpt" / "step_5" / "dl_state_dict.bin", weights_only=True)
    # the position, and what was read (namespace, dataset.json's hash, manifest view: consumer/_identity.py)
    assert cursor_of(state).step == 5 and set(state) == {"tgb_cursor", "tgb_source"}
    assert set(state["tgb_source"]) >= {"namespace", "dataset", "versions"}
