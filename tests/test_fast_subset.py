"""The fast subset (`python -m pytest -q tests -m fast`) covers every module of torch_tgb.

``tests/conftest.py`` marks every test ``fast`` except the multi-process,
soak and cloud-emulator ones and those listed in ``tests/fast_excluded.txt``,
and runs this test last. Here, at the end of such a run, every module of the
package must have been imported by the tests before: a module whose tests
were all excluded would otherwise go unchecked by a contributor's first run.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest

import torch_tgb

#: modules a test process never imports by design
NEVER_IMPORTED = {
    "torch_tgb.cli.__main__",  # `python -m torch_tgb.cli`: the tests run the CLI in subprocesses through it
}

#: a run of fewer tests than this is not a subset run (this file alone, a -k selection): nothing to check
MIN_TESTS = 200


def all_modules() -> list[str]:
    """Every module and package of torch_tgb, by name."""
    names = [torch_tgb.__name__]
    for info in pkgutil.walk_packages(torch_tgb.__path__, prefix=f"{torch_tgb.__name__}."):
        names.append(info.name)
    return sorted(set(names) - NEVER_IMPORTED)


def _importable(name: str) -> bool:
    """False when the module needs an optional extra that is not installed here (then no test can import it)."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def test_every_module_was_imported_by_the_run(request: pytest.FixtureRequest) -> None:
    if len(request.session.items) < MIN_TESTS:
        pytest.skip(f"only {len(request.session.items)} tests selected: run it with the subset (-m fast) or the suite")
    missing = [name for name in all_modules() if name not in sys.modules]
    uncovered = [name for name in missing if _importable(name)]
    assert not uncovered, (
        f"{len(uncovered)} modules of torch_tgb were imported by no test of this run: {', '.join(uncovered)}; "
        "a module's core test belongs in the fast subset (tests/fast_excluded.txt lists what is left out)"
    )


def test_the_subset_is_marked_from_the_exclusion_list(pytestconfig: pytest.Config) -> None:
    from tests.conftest import NOT_FAST_MARKERS, _listed, fast_excluded

    excluded = fast_excluded()
    assert all(entry.startswith("tests/") for entry in excluded)
    assert _listed("tests/a/test_b.py::test_c[1]", ("tests/a/test_b.py",))
    assert _listed("tests/a/test_b.py::test_c[1]", ("tests/a/test_b.py::test_c",))
    assert not _listed("tests/a/test_b.py::test_d", ("tests/a/test_b.py::test_c",))
    assert "slow" in NOT_FAST_MARKERS
