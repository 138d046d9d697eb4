"""Fixtures of the security suite."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _tamper import Tamper  # noqa: E402


@pytest.fixture
def tamper(tmp_path: Path) -> Tamper:
    t = Tamper(tmp_path / "ns")
    assert t.read_all() == [0, 1, 2]  # the untampered namespace reads fine
    return t
