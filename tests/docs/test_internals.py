"""docs/internals.md: its floor plan is the layer test's, and the modules its flows name exist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layers import FLOORS, PURE

ROOT = Path(__file__).resolve().parents[2]
INTERNALS = ROOT / "docs" / "internals.md"

#: a floor line of the plan: "floor 12  integrations/ testing/          description"
_FLOOR_LINE = re.compile(r"^floor\s+(\d+)\s{2}(.*)$")


def _floor_plan(text: str) -> tuple[dict[int, set[str]], set[str]]:
    """(floor -> units, pure units) from the first code block under "## Floor plan".

    The units column ends at the first run of two spaces; a unit is a package
    (``cli/``) or a module (``errors.py``, ``torch_tgb/__init__.py`` for the
    package root), and ``(pure)`` marks the units of its line as pure.
    """
    section = text.split("## Floor plan", 1)[1]
    block = section.split("```", 2)[1]
    floors: dict[int, set[str]] = {}
    pure: set[str] = set()
    for line in block.splitlines():
        match = _FLOOR_LINE.match(line)
        if match is None:
            continue  # a description's continuation line
        number, rest = int(match.group(1)), match.group(2).strip()
        column = re.split(r"\s{2,}", rest, maxsplit=1)[0].split()
        units = set()
        for token in column:
            if token == "(pure)":
                continue
            if token == "torch_tgb/__init__.py":
                units.add("torch_tgb")
            elif token.endswith("/"):
                units.add(token[:-1])
            elif token.endswith(".py"):
                units.add(token[: -len(".py")])
            else:
                raise AssertionError(f"floor {number}: {token!r} is neither a package/ nor a module.py")
        assert number not in floors, f"floor {number} is drawn twice"
        floors[number] = units
        if "(pure)" in column:
            pure |= units
    return floors, pure


def test_floor_plan_is_the_layer_tests():
    floors, pure = _floor_plan(INTERNALS.read_text())
    expected = dict(enumerate(FLOORS))
    assert floors == expected, (
        "docs/internals.md's floor plan differs from tests/test_layers.py FLOORS:\n"
        + "\n".join(
            f"  floor {n}: doc {sorted(floors.get(n, set()))} vs FLOORS {sorted(expected.get(n, set()))}"
            for n in sorted(set(floors) | set(expected))
            if floors.get(n) != expected.get(n)
        )
    )
    assert pure == PURE, f"(pure) marks {sorted(pure)}, tests/test_layers.py PURE is {sorted(PURE)}"


def test_the_parser_sees_a_changed_plan():
    text = INTERNALS.read_text()
    floors, _ = _floor_plan(text.replace("floor 13  cli/", "floor 13  cli/ extra/", 1))
    assert floors[13] == {"cli", "extra"}


def test_the_modules_the_doc_names_exist():
    """Every ``pkg/module.py`` path the page names (outside the floor plan) is a file of torch_tgb."""
    text = INTERNALS.read_text()
    missing = []
    for path in sorted(set(re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", text))):
        candidates = [ROOT / "torch_tgb" / path, ROOT / path]
        if not any(c.is_file() for c in candidates):
            missing.append(path)
    assert not missing, f"docs/internals.md names modules that do not exist: {missing}"
