"""Lazy re-exports for package ``__init__`` modules (PEP 562).

A package maps public names to the modules that define them; a name is
imported on first use, so importing the package stays cheap and optional
dependencies load only when their names are used. ``require`` imports an
optional dependency or names the extra that installs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["lazy_exports", "require"]


def lazy_exports(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps a public name to its module.

    A name equal to its module's last component is the module itself (``tgb.checkpoint``).
    Resolved values are cached in the package's ``namespace``.
    """

    def __getattr__(name: str) -> Any:
        module_name = names.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(module_name)
        value = module if module_name == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(namespace.get("__all__", names))

    return __getattr__, __dir__


def require(module: str, extra: str) -> ModuleType:
    """Import an optional dependency, or raise ``MissingExtra`` (an ImportError) naming the extra."""
    from torch_tgb.errors import MissingExtra

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(f"{module} is not installed; pip install 'torch-tgb[{extra}]'") from e
