"""torchrun with 4 CPU processes (gloo), dp=2 x cp=2, reading while a producer still commits.

Every rank checks every tensor against what was produced and all-gathers
(step, TGB) each step; the run exits non-zero on any disagreement.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
STEPS = 12

# Commits two steps, waits until rank 0 has read one (marker file), then commits the rest one
# by one: the ranks are guaranteed to read while the producer is still committing.
PRODUCER = f"""
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from tests.consumer._support import LAYOUT, make_batch
from torch_tgb.producer import Producer
marker = sys.argv[2]
with Producer(sys.argv[1], producer_id="live", layout=LAYOUT, commit_policy="naive") as p:
    for offset in range({STEPS}):
        p.append(make_batch(offset), offset=offset)
        p.flush()
        if offset == 1:
            deadline = time.monotonic() + 120
            while not os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
        time.sleep(0.05)
    p.close(seal=True)
print("producer committed while readers ran:", os.path.exists(marker), flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(ns: str, mode: str, *, live: bool = True, timeout: float = 240) -> subprocess.CompletedProcess:
    marker = ns.rstrip("/") + ".reading"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TGB_TEST_MARKER": marker}
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, ns, marker], env=env,
                                stdout=subprocess.PIPE, text=True) if live else None
    try:
        return subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", "--master-port",
             str(free_port()), str(HERE / "_reader_rank.py"), ns, mode, str(STEPS)],
            env=env, capture_output=True, text=True, timeout=timeout,
        )
    finally:
        if producer is not None:
            out, _ = producer.communicate(timeout=120)
            assert producer.returncode == 0 and "while readers ran: True" in out, out


def _produce_all(ns: str) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.consumer._support import produce

    produce(ns, STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["env", "device_mesh"])
def test_four_ranks_agree_while_producer_commits(tmp_path: Path, mode: str) -> None:
    result = torchrun(str(tmp_path), mode)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("all ranks agreed") == 4


@pytest.mark.slow
def test_four_ranks_with_loader_workers(tmp_path: Path) -> None:
    _produce_all(str(tmp_path))
    result = torchrun(str(tmp_path), "loader", live=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("all ranks agreed") == 4


@pytest.mark.slow
def test_disagreement_exits_nonzero(tmp_path: Path) -> None:
    _produce_all(str(tmp_path))
    result = torchrun(str(tmp_path), "skew", live=False)
    assert result.returncode != 0
    assert "ranks disagree on the step sequence" in result.stdout + result.stderr
