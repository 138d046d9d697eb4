"""A small sealed namespace for the CLI tests, written in-process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tgb_cli(*args: str, timeout: float = 120, env_extra: dict[str, str] | None = None,
            **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run the installed ``tgb`` entry point as a user does, importing this checkout (PYTHONPATH)."""
    exe = shutil.which("tgb")
    cmd = [exe] if exe else [sys.executable, "-m", "torch_tgb.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default", **(env_extra or {})}
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]


def write_namespace(path: Path, *, steps: int = 6, producer_id: str = "p0", seal: bool = True) -> str:
    """``steps`` batches of synthetic tokens, dp=2, one version per step (naive policy)."""
    import torch_tgb as tgb
    from torch_tgb.cli._produce_impl import synthetic_batch

    ns = str(path)
    layout = tgb.Layout(dp=2, seq_keys=("input_ids", "labels"))
    with tgb.Producer(ns, producer_id=producer_id, layout=layout, commit_policy="naive") as producer:
        for offset in range(producer.resume_offset, steps):
            producer.append(synthetic_batch(offset, global_batch=4, seq_len=8, vocab_size=100, seed=0), offset=offset)
        producer.flush()
        if seal:
            producer.close(seal=True)
    return ns


@pytest.fixture
def small_ns(tmp_path: Path) -> str:
    return write_namespace(tmp_path / "ns")
