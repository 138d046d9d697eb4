"""Test modules have unique basenames: the suite runs without packages under tests/, so two ``test_x.py`` break collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def test_no_two_test_modules_share_a_basename():
    seen: dict[str, list[str]] = defaultdict(list)
    root = Path(__file__).parent
    for path in root.rglob("*.py"):
        if "__pycache__" not in path.parts and path.name != "__init__.py" and path.name != "conftest.py":
            seen[path.name].append(str(path.relative_to(root)))
    shared = {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1 and name.startswith("test_")}
    assert not shared, f"rename one of each: {shared}"
