"""Every module docstring names only things that exist.

A module's docstring is the first thing a reader reads; a name left behind by
a move or a rename (``ReadPath.cast`` after casting moved to the finisher)
sends them looking for what is not there. Checked: Sphinx roles
(``:class:`X```, ``:meth:`X.y```, ...) resolve in the module, in a module of
the package, or as an attribute the named class sets on ``self``; and the
``.py`` files a docstring names exist.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import torch_tgb

ROOT = Path(torch_tgb.__file__).parent
ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|exc|obj):`~?([\w.]+)`")
FILE = re.compile(r"(?<![\w/.])((?:[\w]+/)*[\w]+\.py)\b")


def _modules() -> dict[str, ModuleType]:
    found = {"torch_tgb": torch_tgb}
    for info in pkgutil.walk_packages(torch_tgb.__path__, "torch_tgb."):
        if not info.name.endswith("__main__"):
            found[info.name] = importlib.import_module(info.name)
    return found


MODULES = _modules()


def _sets_on_self(cls: type, name: str) -> bool:
    """Whether ``cls`` (or a base of it in the package) assigns or annotates ``self.<name>``/``<name>``."""
    for klass in cls.__mro__:
        try:
            tree = ast.parse(inspect.getsource(klass).lstrip())
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            target = node.target if isinstance(node, ast.AnnAssign) else None
            targets = node.targets if isinstance(node, ast.Assign) else [target] if target is not None else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == name or isinstance(t, ast.Name) and t.id == name:
                    return True
    return False


def _resolves(owner: Any, parts: list[str]) -> bool:
    obj = owner
    for i, part in enumerate(parts):
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif inspect.isclass(obj) and i == len(parts) - 1:
            return _sets_on_self(obj, part)
        else:
            return False
    return True


def _exists(module: ModuleType, dotted: str) -> bool:
    parts = dotted.split(".")
    if _resolves(module, parts):
        return True
    if len(parts) == 1:  # a method or attribute named bare in the module of its class
        classes = [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == module.__name__]
        if any(_resolves(c, parts) for c in classes):
            return True
    try:
        importlib.import_module(dotted.split(".")[0])  # a library's name (``logging``)
        return True
    except ImportError:
        pass
    return any(_resolves(other, parts) for other in MODULES.values())


def _file_exists(module_path: Path, name: str) -> bool:
    candidates = [ROOT / name, module_path.parent / name, ROOT.parent / name]
    return any(c.exists() for c in candidates) or any(ROOT.rglob(Path(name).name))


def test_module_docstrings_name_only_what_exists() -> None:
    missing = []
    for name, module in MODULES.items():
        doc = module.__doc__ or ""
        path = Path(module.__file__ or "")
        missing += [f"{name}: {ref}" for ref in ROLE.findall(doc) if not _exists(module, ref)]
        missing += [f"{name}: {f}" for f in FILE.findall(doc) if not _file_exists(path, f)]
    assert not missing, "module docstrings name what does not exist:\n" + "\n".join(missing)
