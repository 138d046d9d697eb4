"""One read per TP group (``distributed.GroupBroadcast``): 4 ranks under torchrun (gloo), dp=2 x tp=2.

The TP peers of each dp slice deliver the same batches as when every rank reads its slice itself,
but only the group's first rank sends requests to the store (its peer: 0). A run stopped after 3
steps and resumed from its saved states continues exactly, and an error on the reading rank reaches
its peer as an error, not a hang.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.distributed.test_torchrun import free_port
from torch_tgb import Layout, Producer

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
ROOT = HERE.parent.parent
STEPS = 8


def run(ns: str, phase: str, states: Path) -> dict[int, tuple[list[int], list[int], int] | str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", "--master-port",
                           str(free_port()), str(HERE / "_broadcast_rank.py"), ns, phase, str(states)],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[int, tuple[list[int], list[int], int] | str] = {}
    for m in re.finditer(r"rank (\d) steps \[([^\]]*)\] sums \[([^\]]*)\] requests (\d+)", proc.stdout):
        ints = [[int(x) for x in g.split(",") if x.strip()] for g in (m.group(2), m.group(3))]
        out[int(m.group(1))] = (ints[0], ints[1], int(m.group(4)))
    for m in re.finditer(r"rank (\d) error (.*)", proc.stdout):
        out[int(m.group(1))] = m.group(2)
    assert sorted(out) == [0, 1, 2, 3], proc.stdout + proc.stderr[-2000:]
    return out


@pytest.fixture
def ns(tmp_path) -> str:
    path = str(tmp_path / "ns")
    with Producer(path, producer_id="p", layout=Layout(dp=2, seq_keys=("ids",)), commit_policy="naive") as p:
        for step in range(STEPS):
            ids = torch.arange(16, dtype=torch.int64).reshape(2, 8) + 100 * step
            ids[1] += 50  # slice 1 differs from slice 0
            p.append({"ids": ids}, offset=step)
        p.close(seal=True)
    return path


def test_tp_peers_get_the_slice_their_reader_read(ns, tmp_path) -> None:
    plain = run(ns, "plain", tmp_path)
    shared = run(ns, "all", tmp_path)
    for rank in range(4):  # ranks 0, 1: dp 0 (tp 0, 1); ranks 2, 3: dp 1
        assert isinstance(plain[rank], tuple) and isinstance(shared[rank], tuple)
        assert shared[rank][:2] == plain[rank][:2], (rank, plain, shared)
        assert shared[rank][0] == list(range(STEPS))
    assert shared[0][1] != shared[2][1]  # the two dp slices differ
    assert shared[1][2] == shared[3][2] == 0  # a receiver sends no request
    assert shared[0][2] > 0 and shared[2][2] > 0
    assert plain[1][2] > 0  # without the broadcast every rank reads


def test_a_resume_continues_exactly(ns, tmp_path) -> None:
    first = run(ns, "first", tmp_path)
    rest = run(ns, "rest", tmp_path)
    for rank in range(4):
        assert first[rank][0] + rest[rank][0] == list(range(STEPS)), (rank, first, rest)


def test_an_error_on_the_reader_reaches_its_peers(ns, tmp_path) -> None:
    from tests.consumer.test_skip_step import flip

    flip(ns, 4, dp=0)
    out = run(ns, "all", tmp_path)
    assert "CorruptObject" in out[0] and "step=4" in out[0]
    assert "rank 0 (the reader of this rank's group) failed: CorruptObject" in out[1]
    assert isinstance(out[2], tuple) and out[2][0] == list(range(STEPS))  # dp 1 was not damaged
