"""Helpers to run the example scripts as users do, at a tiny size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run_example(args: list[str], *, timeout: float = 300, torchrun: int | None = None) -> subprocess.CompletedProcess:
    """Run ``examples/<args[0]>`` (under torchrun with that many processes if given); fail on a non-zero exit."""
    script = str(EXAMPLES / args[0])
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={torchrun}", script]
    else:
        cmd = [sys.executable, script]
    env = dict(os.environ, TGB_PROGRESS="0", OMP_NUM_THREADS="1")
    proc = subprocess.run([*cmd, *args[1:]], capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        pytest.fail(f"{args[0]} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture
def run_example():
    """``run_example(["script.py", *args], torchrun=N)``: the completed process (a failure fails the test)."""
    return _run_example


@pytest.fixture
def tiny_gpt():
    """The examples' ``_tiny_gpt`` module (model, loss, batch_digest)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tgb_examples_tiny_gpt", EXAMPLES / "_tiny_gpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
