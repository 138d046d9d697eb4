"""The floor plan of the package holds: nothing imports upward, the pure floors stay pure, no import loops.

Every ``import`` in ``torch_tgb/`` counts, also those inside functions (a lazy
import is still a dependency); only ``if TYPE_CHECKING:`` blocks are exempt
(they never run). The floors are the ones drawn in ``docs/internals.md``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "torch_tgb"

#: bottom to top; a package may import from its own floor and the floors below it
FLOORS: list[set[str]] = [
    {"torch_tgb", "errors", "_lazy", "_progress", "_options", "_queues", "_registry", "_on_error"},
    {"storage", "observability"},
    {"cursor", "layout"},
    {"distributed", "format"},
    {"manifest"},
    {"transforms"},
    {"sources", "lineage"},
    {"producer"},
    {"datapipes"},
    {"consumer"},
    {"offline"},
    {"checkpoint"},
    {"integrations", "testing"},
    {"cli"},
]
FLOOR = {unit: level for level, units in enumerate(FLOORS) for unit in units}

#: pure floors: plain functions and values, nothing of torch_tgb but errors (and the registry type that
#: their named methods are registered in), no torchdata, no I/O layers
PURE = {"cursor", "layout", "transforms"}
PURE_MAY_IMPORT = {"errors", "torch_tgb", "_registry"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    return "torch_tgb" if len(parts) == 1 else parts[1]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, *, top_level_only: bool) -> Iterator[tuple[str, int]]:
    """(imported module, line) of every import that can run, skipping TYPE_CHECKING blocks."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno
            for alias in node.names:  # `from torch_tgb import manifest` imports the module manifest
                yield f"{node.module}.{alias.name}", node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        if top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _sources() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def _package_modules() -> set[str]:
    return {_module_name(p) for p in _sources()}


def test_every_package_has_a_floor():
    units = {_unit(_module_name(p)) for p in _sources()}
    assert units <= set(FLOOR), f"packages without a floor in FLOORS: {sorted(units - set(FLOOR))}"


def test_nothing_imports_upward():
    upward = []
    modules = _package_modules()
    for path in _sources():
        src = _unit(_module_name(path))
        for target, line in _imports(ast.parse(path.read_text()), top_level_only=False):
            if not target.startswith("torch_tgb") or (target not in modules and target.rsplit(".", 1)[0] not in modules):
                continue
            dst = _unit(target) if target in modules else _unit(target.rsplit(".", 1)[0])
            if FLOOR[dst] > FLOOR[src]:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} ({src}, floor {FLOOR[src]}) imports {target} "
                              f"({dst}, floor {FLOOR[dst]})")
    assert not upward, "imports against the floor plan:\n" + "\n".join(sorted(set(upward)))


@pytest.mark.parametrize("unit", sorted(PURE))
def test_pure_floors_import_only_errors(unit):
    impure = []
    for path in _sources():
        if _unit(_module_name(path)) != unit:
            continue
        for target, line in _imports(ast.parse(path.read_text()), top_level_only=False):
            first = target.split(".")[0]
            if first == "torchdata" or (first == "torch_tgb" and _unit(target) not in {unit, *PURE_MAY_IMPORT}):
                impure.append(f"{path.relative_to(ROOT.parent)}:{line} imports {target}")
    assert not impure, f"{unit} must stay pure:\n" + "\n".join(sorted(set(impure)))


def test_no_import_loops_between_modules():
    """Module-level imports (the ones that run at import time) form no cycle."""
    modules = _package_modules()
    graph: dict[str, set[str]] = {}
    for path in _sources():
        name = _module_name(path)
        deps = set()
        for target, _ in _imports(ast.parse(path.read_text()), top_level_only=True):
            if target in modules and target != name:
                deps.add(target)
        graph[name] = deps
    # a package __init__ is imported by its submodules' import anyway: drop parent edges
    for name in graph:
        graph[name] = {d for d in graph[name] if not name.startswith(d + ".")}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        if node in visiting:
            cycle = visiting[visiting.index(node) :] + [node]
            raise AssertionError("import loop: " + " -> ".join(cycle))
        visiting.append(node)
        for dep in sorted(graph.get(node, ())):
            visit(dep)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The checker itself: an import from a lower floor to a higher one is found."""
    tree = ast.parse("def f():\n    from torch_tgb.consumer import TGBDataset\n")
    found = [t for t, _ in _imports(tree, top_level_only=False)]
    assert "torch_tgb.consumer" in found and FLOOR["consumer"] > FLOOR["format"]
    typed = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from torch_tgb.consumer import X\n")
    assert "torch_tgb.consumer" not in [t for t, _ in _imports(typed, top_level_only=False)]


#: the two sides of the house: neither imports the other (their common ground is the floors below them)
READER_SIDE = ("torch_tgb.consumer", "torch_tgb.datapipes.read")
PRODUCER_SIDE = ("torch_tgb.producer", "torch_tgb.sources", "torch_tgb.datapipes.produce", "torch_tgb.offline")


def _side(module: str) -> str | None:
    for side, prefixes in (("reader", READER_SIDE), ("producer", PRODUCER_SIDE)):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return side
    return None


def test_the_reader_and_producer_sides_stay_apart():
    """The floors are a total order, so ``consumer`` (floor 9) could import ``producer`` (floor 7) without an
    upward arrow: this keeps the sides apart (a partial order), as docs/internals.md draws them."""
    crossing = []
    for path in _sources():
        src = _side(_module_name(path))
        if src is None:
            continue
        for target, line in _imports(ast.parse(path.read_text()), top_level_only=False):
            dst = _side(target)
            if dst is not None and dst != src:
                crossing.append(f"{path.relative_to(ROOT.parent)}:{line} ({src} side) imports {target} ({dst} side)")
    assert not crossing, "the reader and producer sides import each other:\n" + "\n".join(sorted(set(crossing)))


def test_the_side_check_sees_a_crossing():
    assert _side("torch_tgb.consumer.dataset") == "reader" and _side("torch_tgb.sources.webdataset") == "producer"
    assert _side("torch_tgb.manifest") is None and _side("torch_tgb.datapipes") is None
