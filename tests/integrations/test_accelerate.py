"""HF accelerate itself (torchrun, 2 CPU processes): prepare keeps the loader, save_state/load_state resume exactly.

``examples/accelerate_train.py`` passes a ``tgb.DataLoader`` through
``accelerator.prepare`` (which must return it unchanged: no re-sharding, no
dispatch from process 0), trains 12 steps with ``save_state`` every 5, then a
second launch ``load_state``s ``step_5`` (a rollback past the stop, with a
loader worker this time) and trains to 16. Every step must be the TGB step of
that number, this rank's slice, once per run.
"""

from __future__ import annotations

import sys

import pytest
import torch

from tests.integrations._frameworks import batches, check_run, torchrun
from torch_tgb.consumer import cursor_of

try:
    import accelerate  # noqa: F401
except ImportError as e:  # CI installs the [accelerate] extra; elsewhere say why nothing ran
    print(f"skipping the accelerate tests: import accelerate failed: {e}", file=sys.stderr)
    pytest.skip(f"accelerate is not installed ({e}): pip install 'torch-tgb[accelerate]'", allow_module_level=True)

pytestmark = pytest.mark.slow


def test_prepare_save_state_load_state_train_each_step_once(tmp_path):
    work = tmp_path / "run"
    args = ["--workdir", str(work), "--log-batches", "--steps", "16"]
    torchrun("accelerate_train.py", *args, "--stop-after", "12")
    first = {rank: batches(work, rank) for rank in (0, 1)}
    # one file written by both processes: the rank-independent position after 5 trained steps
    state = torch.load(work / "ckpt" / "step_5" / "dl_state_dict.bin", weights_only=True)
    assert cursor_of(state).step == 5 and set(state) == {"tgb_cursor"}

    for rank in (0, 1):
        (work / f"batches-rank{rank}.jsonl").unlink()
    torchrun("accelerate_train.py", *args, "--resume", str(work / "ckpt" / "step_5"), "--workers", "1")
    for rank in (0, 1):
        check_run(first[rank], rank, range(12))
        check_run(batches(work, rank), rank, range(5, 16))
