"""Two ranks (torchrun, gloo) skip exactly the same corrupt steps, whichever rank found them, also on resume.

Bytes are flipped in rank 0's slice of steps 3 and 8 and in rank 1's slice of step 5: each rank can read
the others. With on_corrupt="skip_step" both ranks skip steps 3, 5 and 8 (they agree step by step over the
process group), count 3 each, and the namespace holds a marker per step; a run stopped after 3 steps and
resumed from its saved states delivers the same steps as an uninterrupted one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.consumer.test_skip_step import STEPS, batch, flip
from tests.distributed.test_torchrun import free_port
from torch_tgb import Layout, Producer
from torch_tgb.manifest.skips import skipped_steps
from torch_tgb.storage import LocalStore

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
ROOT = HERE.parent.parent
EXPECTED = [s for s in range(STEPS) if s not in (3, 5, 8)]


def run(ns: str, phase: str, states: Path) -> dict[int, tuple[list[int], int]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(free_port()), str(HERE / "_skip_rank.py"), ns, phase, str(states)],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = {}
    for m in re.finditer(r"rank (\d) steps \[([^\]]*)\] skipped (\d+)", proc.stdout):
        out[int(m.group(1))] = ([int(x) for x in m.group(2).split(",") if x.strip()], int(m.group(3)))
    assert sorted(out) == [0, 1], proc.stdout
    return out


@pytest.fixture
def ns(tmp_path) -> str:
    path = str(tmp_path / "ns")
    with Producer(path, producer_id="p", layout=Layout(dp=2, seq_keys=("ids",)), commit_policy="naive") as p:
        for step in range(STEPS):
            p.append(batch(step), offset=step)
        p.close(seal=True)
    for step, dp in ((3, 0), (8, 0), (5, 1)):
        flip(path, step, dp)
    return path


def test_both_ranks_skip_what_either_found(ns, tmp_path) -> None:
    out = run(ns, "all", tmp_path)
    for rank in (0, 1):
        assert out[rank] == (EXPECTED, 3), (rank, out)
    assert sorted(skipped_steps(LocalStore(ns))) == [3, 5, 8]


def test_a_resume_in_the_middle_agrees(ns, tmp_path) -> None:
    first = run(ns, "first", tmp_path)
    rest = run(ns, "rest", tmp_path)
    for rank in (0, 1):
        assert first[rank][0] + rest[rank][0] == EXPECTED, (rank, first, rest)
