"""Issue 47: a 2-rank run (torchrun, gloo) resumed from a checkpoint taken before an excision trains the cleaned
bytes at every later step, exactly once, on the same slices and rows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.distributed.test_torchrun import free_port
from tests.lineage._corpus import corpus, pieces, produce, read_all, record, same
from torch_tgb.lineage import excise, verify_deny

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
ROOT = HERE.parent.parent
KEYS = ("input_ids", "seq_lens", "provenance")


def run(ns: str, phase: str, out: Path) -> list[list[dict[str, torch.Tensor]]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(free_port()), str(HERE / "_excise_rank.py"), ns, phase, str(out)],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(re.findall(r"rank \d read", proc.stdout)) == 2, proc.stdout
    return [torch.load(out / f"{phase}-rank{r}.pt") for r in (0, 1)]


def test_a_run_resumed_after_an_excision_reads_the_cleaned_steps_once_on_the_same_slices(tmp_path) -> None:
    path, idx, _ = corpus(tmp_path, docs=200)
    ns = str(tmp_path / "ns")
    produce(ns, path, idx, dp=2, segment_tgbs=3)
    before = read_all(ns, 2, KEYS)
    steps = len(before[0])
    first = run(ns, "first", tmp_path)  # the checkpoint: 3 steps read on each rank, states saved
    for rank in (0, 1):
        assert all(same(a, b) for a, b in zip(first[rank], before[rank][:3]))
    # records held by later steps (and one held by an early step only, if any): excised after the checkpoint
    later = {int(x) for b in before[0][4:] + before[1][6:] for x in b["provenance"][:, 1].tolist()}
    denied = sorted(later)[::9][:6]
    report = excise(ns, [record(path, d) for d in denied], who="test")
    assert report.version is not None and any(s >= 3 for s in report.steps)
    rest = run(ns, "rest", tmp_path)
    assert verify_deny(ns, [record(path, d) for d in denied]).rows == 0
    after = read_all(ns, 2, KEYS)
    for rank in (0, 1):
        assert len(rest[rank]) == steps - 3  # every later step, exactly once
        for k, batch in enumerate(rest[rank]):
            step = 3 + k
            assert same(batch, after[rank][step])  # the cleaned TGB of this step, this rank's slice
            assert not np.isin(batch["provenance"][:, 1].numpy(), denied).any()
            for r in range(batch["input_ids"].shape[0]):  # the same rows, every other piece intact, in order
                kept = [p for p in pieces(before[rank][step], r) if p[0] not in denied]
                assert pieces(batch, r) == kept, (rank, step, r)
        changed = {3 + k for k, b in enumerate(rest[rank]) if not same(b, before[rank][3 + k])}
        assert changed and changed <= set(report.steps)
