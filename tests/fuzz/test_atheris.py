"""Short atheris (libFuzzer) runs of each target in ``atheris_targets.py``; skipped without atheris."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("atheris")

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("target", ["footer", "footer_sealed", "version", "dataset", "llmbatch"])
def test_atheris_target(target: str, tmp_path) -> None:
    runs = int(os.environ.get("TGB_ATHERIS_RUNS", "20000"))
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "atheris_targets.py"), target, f"-atheris_runs={runs}",
         "-max_len=16384", "-seed=1", f"-artifact_prefix={tmp_path}/"],
        capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, f"atheris found a crash in {target}:\n{proc.stderr[-4000:]}"
    assert "Done" in proc.stderr or "DONE" in proc.stderr or runs <= 0, proc.stderr[-2000:]
