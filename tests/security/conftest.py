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


@pytest.fixture(autouse=True)
def fresh_reader_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read here stands for a fresh reader process, as a crafted namespace reaches one: nothing an earlier
    read of the untampered namespace learnt is reused (the open cache trusts committed versions to stay as
    they were within a process: consumer/_open_cache.py)."""
    from torch_tgb.consumer._open_cache import OPEN_CACHE

    OPEN_CACHE.clear()
    monkeypatch.setattr(OPEN_CACHE, "remember", lambda *args, **kwargs: None)
