"""``Registry``: the one way torch_tgb is extended by name (stores, source kinds, balancers, commit policies).

A registry maps a name to an entry (a factory, a function, a value) and is
what both the constructors (``open_store``, ``GlobalBatches``, ``Batching``,
``make_policy``) and the command line's choices read, so a new store scheme,
source kind, balancing method or commit policy is one registration in one
place::

    BALANCERS.register("mine", my_balancer)

Rules, each refused with a :class:`~torch_tgb.errors.RegistryError` that
says what to do: a name is registered once (``replace=True`` says a
replacement is meant); an unknown name's error lists the names there are.

**Plugins.** A registry with an entry-point ``group`` also finds entries that
installed distributions declare there, so a third-party package extends
torch_tgb without touching it (``pyproject.toml``)::

    [project.entry-points."torch_tgb.balancers"]
    mine = "my_package.balance:mine"

The group is read only when a name is not registered already (and for
:meth:`Registry.names`, which error messages and the command line's help
read), once per ``sys.path``: looking up a built-in name costs a dict lookup,
nothing more. An
entry point is imported on its first use and then kept like a registration.
An entry point may not take a registered name, and two may not share one:
both are refused when the group is read, naming the distributions.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

from torch_tgb.errors import RegistryError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to entries of one kind (``kind`` names it in errors); see the module docstring.

    ``group``: the entry-point group plugins register in (``None``: none).
    ``coerce``: turns what is registered (or an entry point's object) into an
    entry, refusing what cannot be one (default: kept as it is).
    """

    def __init__(self, kind: str, *, group: str | None = None, coerce: Callable[[Any], T] | None = None) -> None:
        self.kind = kind
        self.group = group
        self._coerce = coerce
        self._entries: dict[str, T] = {}
        self._loaded: set[str] = set()  # names registered from the entry-point group
        # the group's entry points, read once per sys.path (installing a plugin into a running process
        # changes sys.path, or call refresh())
        self._scanned: tuple[tuple[str, ...], list[importlib.metadata.EntryPoint]] | None = None

    @overload
    def register(self, name: str, entry: None = None, *, replace: bool = False) -> Callable[[Any], Any]: ...

    @overload
    def register(self, name: str, entry: Any, *, replace: bool = False) -> T: ...

    def register(self, name: str, entry: Any = None, *, replace: bool = False) -> Any:
        """Register ``entry`` under ``name`` and return it (as a decorator without ``entry``: the function).

        A name already registered is refused unless ``replace=True``.
        """
        if entry is None:
            def decorate(obj: Any) -> Any:
                self.register(name, obj, replace=replace)
                return obj

            return decorate
        if not isinstance(name, str) or not name or name != name.strip():
            raise RegistryError(f"a {self.kind} name must be a non-empty string without surrounding spaces, "
                                f"got {name!r}")
        if name in self._entries and not replace:
            raise RegistryError(f"{self.kind} {name!r} is registered already; choose another name, or pass "
                                f"replace=True to replace it")
        value = self._coerce(entry) if self._coerce is not None else entry
        self._entries[name] = value
        return value

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's registration, say); an unknown name is refused like a lookup."""
        if name not in self._entries:
            raise self._unknown(name)
        del self._entries[name]
        self._loaded.discard(name)

    def __getitem__(self, name: str) -> T:
        """The entry of ``name``: registered, else from the entry-point group; unknown names are refused."""
        entry = self._entries.get(name)
        if entry is not None:
            return entry
        point = self._plugins().get(name)
        if point is None:
            raise self._unknown(name)
        try:
            loaded = point.load()
        except Exception as e:  # a broken plugin: name it, keep its own error as the cause
            raise RegistryError(f"{self.kind} {name!r} from entry point {point.value!r} (group {self.group!r}) "
                                f"cannot be loaded: {type(e).__name__}: {e}") from e
        value = self.register(name, loaded)
        self._loaded.add(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self._plugins())

    def names(self) -> tuple[str, ...]:
        """Every name there is, registered or declared by an installed plugin, sorted."""
        return tuple(sorted({*self._entries, *self._plugins()}))

    def __iter__(self) -> Iterator[str]:
        """The names (so a registry serves as argparse ``choices``: membership first, the list only for help)."""
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, group={self.group!r}, registered={sorted(self._entries)})"

    def _unknown(self, name: object) -> RegistryError:
        return RegistryError(f"unknown {self.kind} {name!r}; choose from {', '.join(self.names()) or 'none'}"
                             + (f" (or install a package that adds one under entry-point group {self.group!r})"
                                if self.group else ""))

    def refresh(self) -> None:
        """Read the entry-point group again on the next lookup (a plugin installed into a running process)."""
        self._scanned = None

    def _points(self) -> list[importlib.metadata.EntryPoint]:
        path = tuple(sys.path)
        if self.group is None:
            return []
        if self._scanned is None or self._scanned[0] != path:
            self._scanned = (path, list(importlib.metadata.entry_points(group=self.group)))
        return self._scanned[1]

    def _plugins(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The group's entry points not registered yet, by name; a name taken twice is refused."""
        found: dict[str, importlib.metadata.EntryPoint] = {}
        for point in self._points():
            if point.name in self._loaded:
                continue  # loaded before: registered from this group
            if point.name in self._entries:
                raise RegistryError(f"{self.kind} {point.name!r}: entry point {point.value!r} of "
                                    f"{_distribution(point)} (group {self.group!r}) takes a name registered "
                                    f"already; the plugin must choose another name")
            if point.name in found and found[point.name].value != point.value:
                raise RegistryError(f"{self.kind} {point.name!r} is declared twice in entry-point group "
                                    f"{self.group!r}: {found[point.name].value!r} of "
                                    f"{_distribution(found[point.name])} and {point.value!r} of "
                                    f"{_distribution(point)}; uninstall one")
            found[point.name] = point
        return found


def _distribution(point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return f"distribution {dist.name!r}" if dist is not None else "an unnamed distribution"

