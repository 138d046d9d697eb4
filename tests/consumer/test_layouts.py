"""The resume, world-size, step and epoch tests pass unchanged on token-efficient rows (labels derived, not stored).

They produce through ``tests/consumer/_support.produce``, which writes
token-efficient rows when ``TGB_TEST_ROWS=efficient``; a reader must deliver
exactly the tensors of the stored layout, so the same assertions hold.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROPERTY_TESTS = ["test_resume_property.py", "test_resume.py", "test_epochs.py", "test_step_property.py"]


@pytest.mark.slow
def test_property_tests_pass_on_token_efficient_rows(tmp_path) -> None:
    env = dict(os.environ, TGB_TEST_ROWS="efficient")
    files = [str(ROOT / "tests" / "consumer" / name) for name in PROPERTY_TESTS]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"), *files],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
