"""Shared by the framework tests: run a script as users do, read back the batches it logged, check them.

Every example logs each rank's batches as JSON lines ``{"global_step", "step",
"samples"}`` where a sample id is ``step * 1000 + row`` of the global batch
(8 rows, dp=2): a batch maps back to its TGB step and slice. The scripts beside
this file (``lightning_offpath.py``, ``accelerate_offpath.py``,
``hf_trainer_workers.py``) use the frameworks off the documented path the same way.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HERE = Path(__file__).resolve().parent
GLOBAL_BATCH = 8
DP = 2


def require(module: str, install: str) -> None:
    """Import ``module`` or skip the calling test module, saying why and how to install it (CI installs them all)."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        print(f"skipping the {module} tests: import {module} failed: {e}", file=sys.stderr)
        pytest.skip(f"{module} is not installed ({e}): {install}", allow_module_level=True)


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 300,
        fails: bool = False) -> subprocess.CompletedProcess:
    """Run ``cmd``: fail the test on a non-zero exit (with its output), or with ``fails`` on a zero one."""
    full_env = dict(os.environ, OMP_NUM_THREADS="1", TGB_PROGRESS="0", PYTHONWARNINGS="ignore", **(env or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    if (proc.returncode != 0) != fails:
        out, err = proc.stdout[-4000:], proc.stderr[-4000:]
        pytest.fail(f"{cmd[:4]} exited {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}")
    return proc


def torchrun(script: str | Path, *args: str, nproc: int = DP, fails: bool = False) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node=nproc examples/<script> *args`` (a path: that script)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(EXAMPLES / script), *args]
    return run(cmd, fails=fails)


def batches(workdir: Path, rank: int) -> list[dict]:
    """The batches rank ``rank`` logged, in order (all runs on this workdir)."""
    path = workdir / f"batches-rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def clear_logs(workdir: Path) -> None:
    for rank in range(DP):
        (workdir / f"batches-rank{rank}.jsonl").unlink(missing_ok=True)


def stop_then_resume(workdir: Path, launch: Callable[..., Any], *resume: str, pass_steps: int | None = None) -> None:
    """Train 12 of 16 steps (checkpoints every 5), then ``launch`` again with ``resume``: both runs step-exact.

    The resumed run is a rollback past the stop to the checkpoint ``resume`` names
    (step 5): it must train steps 5..15, and the first run steps 0..11, each its own
    TGB step and this rank's slice; with ``pass_steps`` (a sealed namespace of that
    many steps, shorter than the run) global step g trains TGB step g % pass_steps.
    """
    args = ["--workdir", str(workdir), "--log-batches", "--steps", "16"]
    launch(*args, "--stop-after", "12")
    first = {rank: batches(workdir, rank) for rank in range(DP)}
    clear_logs(workdir)
    launch(*args, *resume)
    for rank in range(DP):
        check_run(first[rank], rank, range(12), pass_steps=pass_steps)
        check_run(batches(workdir, rank), rank, range(5, 16), pass_steps=pass_steps)


def check_run(records: list[dict], rank: int, global_steps: range, *, dp: int = DP,
              pass_steps: int | None = None) -> None:
    """Global steps ``global_steps`` once each, in order, each the TGB step of that number and this rank's slice.

    ``pass_steps``: the namespace is read in passes of that many steps (global step g is TGB step g % pass_steps).
    """
    assert [r["global_step"] for r in records] == list(global_steps), "a step missing, repeated or out of order"
    for r in records:
        want = r["global_step"] if pass_steps is None else r["global_step"] % pass_steps
        assert r["step"] == want, f"global step {r['global_step']} trained TGB step {r['step']}, not {want}"
    check_slices(records, rank, dp=dp)


def check_steps(records: list[dict], rank: int, steps: list[int], *, dp: int = DP) -> None:
    """The batches trained are TGB steps ``steps``, in this order, each this rank's slice."""
    assert [r["step"] for r in records] == steps, "trained other steps than expected"
    check_slices(records, rank, dp=dp)


def check_slices(records: list[dict], rank: int, *, dp: int = DP) -> None:
    """Every batch is this rank's dp slice of its TGB step (sample ids ``step * 1000 + row``)."""
    rows = GLOBAL_BATCH // dp
    for r in records:
        assert r["samples"] == [r["step"] * 1000 + rank * rows + i for i in range(rows)], f"wrong slice: {r}"


def lightning_entry_point_env(tmp: Path) -> dict[str, str]:
    """PYTHONPATH that makes Lightning load torch-tgb's callbacks_factory entry point.

    A ``pip install`` of this checkout registers it; an editable install made from an
    older checkout does not, so the test then adds the same entry point from a
    throwaway dist-info (what Lightning sees is the same either way).
    """
    names = {ep.value for ep in entry_points(group="pytorch_lightning.callbacks_factory")}
    if "torch_tgb.integrations.lightning:pytorch_lightning_callbacks" in names:
        return {}
    info = tmp / "entry-points" / "torch_tgb_entry_points-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-tgb-entry-points\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "[pytorch_lightning.callbacks_factory]\n"
        "torch_tgb = torch_tgb.integrations.lightning:pytorch_lightning_callbacks\n"
    )
    print("torch-tgb's Lightning entry point is not installed (older editable install): adding it for this test")
    paths = [str(ROOT), str(info.parent), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}
