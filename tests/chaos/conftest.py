"""Chaos suite fixtures and the ``--long`` soak option.

``pytest tests/chaos --long`` (or ``TGB_CHAOS_LONG=1``) multiplies the
number of trials and their length. ``TGB_CHAOS_SEEDS=3,17`` runs only those
seeds (replaying a failure printed by a trial).

pytest reads ``pytest_addoption`` only from conftest files it loads at start
(those of the paths on the command line): name ``tests/chaos`` (or a file in
it) to use ``--long``; the environment variable works from anywhere.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _driver import Zygote  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="chaos soak mode: 10x the trials, longer trials (also TGB_CHAOS_LONG=1)",
    )


def long_mode(config: pytest.Config) -> bool:
    try:
        flag = bool(config.getoption("--long"))
    except ValueError:  # option not registered: this conftest was not loaded at start
        flag = False
    return flag or os.environ.get("TGB_CHAOS_LONG", "") not in ("", "0")


@pytest.fixture(scope="session")
def chaos_long(pytestconfig: pytest.Config) -> bool:
    return long_mode(pytestconfig)


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    """One fork server per session (torch imported once for every chaos process)."""
    z = Zygote()
    try:
        z.ping()
        yield z
    finally:
        z.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos_trials(n, base=0): parametrize chaos_seed with n seeded trials")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chaos_seed" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("chaos_trials")
    n = marker.args[0] if marker else 1
    base = marker.kwargs.get("base", 0) if marker else 0
    chosen = os.environ.get("TGB_CHAOS_SEEDS", "").strip()
    if chosen:
        seeds = [int(s) for s in chosen.split(",") if s.strip()]
    else:
        seeds = list(range(base, base + n * (10 if long_mode(metafunc.config) else 1)))
    metafunc.parametrize("chaos_seed", seeds)
