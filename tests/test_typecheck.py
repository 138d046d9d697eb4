"""The package type-checks with mypy (STYLE.md): a new type error fails the suite."""

from __future__ import annotations

from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api", reason="mypy is part of the 'test' extra")

ROOT = Path(__file__).resolve().parent.parent


def test_package_typechecks(tmp_path) -> None:
    stdout, stderr, status = api.run(
        [str(ROOT / "torch_tgb"), "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path)]
    )
    assert status == 0, f"mypy found problems:\n{stdout}{stderr}"
