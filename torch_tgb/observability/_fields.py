"""Turning a ``stats()`` snapshot into flat ``name → float`` pairs, and naming its source.

Producers and consumers return a frozen dataclass of flat numeric fields from
``stats()``. This module is the one place that knows how to read such an
object generically, so the logger and the Prometheus collector never need to
know the fields' names.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypedDict, runtime_checkable

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["HasStats", "Labels", "SourceSet", "StatsSource", "as_source", "stats_fields"]

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")


@runtime_checkable
class HasStats(Protocol):
    """Anything with a ``stats()`` method returning a dataclass (or mapping) of numbers."""

    def stats(self) -> object: ...


def stats_fields(snapshot: object, *, prefix: str = "") -> dict[str, float]:
    """Numeric fields of ``snapshot`` (a dataclass instance or a mapping), flattened.

    Booleans become 0/1, ``None`` and non-numeric values are skipped, a nested
    dataclass or mapping contributes ``outer_inner`` names. The order is the
    declaration order of the fields.
    """
    if dataclasses.is_dataclass(snapshot) and not isinstance(snapshot, type):
        items = [(f.name, getattr(snapshot, f.name)) for f in dataclasses.fields(snapshot)]
    elif isinstance(snapshot, Mapping):
        items = list(snapshot.items())
    else:
        raise TypeError(f"stats snapshot must be a dataclass instance or a mapping, got {type(snapshot).__name__}")
    out: dict[str, float] = {}
    for name, value in items:
        key = f"{prefix}{name}"
        if isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, (int, float)):
            out[key] = float(value)
        elif (dataclasses.is_dataclass(value) and not isinstance(value, type)) or isinstance(value, Mapping):
            out.update(stats_fields(value, prefix=f"{key}_"))
        else:
            item = getattr(value, "item", None)  # numpy / torch scalars
            if callable(item):
                try:
                    scalar = item()
                except (TypeError, ValueError):
                    continue
                if isinstance(scalar, (int, float)):
                    out[key] = float(scalar)
    return out


def _safe_namespace(url: str) -> str:
    """``url`` without ``user:password@``: labels and log lines must never carry credentials."""
    return _USERINFO.sub(r"\1", url)


class Labels(TypedDict, total=False):
    """The labels of a source, as :func:`as_source` takes them (each guessed when left out)."""

    namespace: str | None
    role: str | None
    id: str | None


@dataclass(frozen=True)
class StatsSource:
    """Where a stats snapshot comes from: the callable plus the labels it is exported under."""

    stats: Callable[[], object]
    namespace: str
    role: str
    id: str

    def labels(self) -> tuple[str, str, str]:
        return (self.namespace, self.role, self.id)

    def fields(self) -> dict[str, float]:
        return stats_fields(self.stats())


def _guess_role(obj: object) -> str:
    name = type(obj).__name__.lower()
    if "producer" in name:
        return "producer"
    if any(word in name for word in ("dataset", "loader", "consumer", "reader")):
        return "consumer"
    if "reclaim" in name:
        return "reclaimer"
    return name or "unknown"


def _guess_namespace(obj: object) -> str:
    for attr in ("namespace", "ns", "url"):
        value = getattr(obj, attr, None)
        if isinstance(value, str):
            return _safe_namespace(value)
    store = getattr(obj, "store", None)
    url = getattr(store, "url", None)
    return _safe_namespace(url) if isinstance(url, str) else ""


def _guess_id(obj: object) -> str:
    for attr in ("producer_id", "id", "rank", "name"):
        value = getattr(obj, attr, None)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
    mesh = getattr(obj, "mesh", None)
    if mesh is not None and hasattr(mesh, "dp_rank"):
        return f"dp{mesh.dp_rank}-cp{getattr(mesh, 'cp_rank', 0)}"
    return type(obj).__name__.lower()  # never an object address: series must survive a restart


def as_source(
    obj: HasStats | StatsSource,
    *,
    namespace: str | None = None,
    role: str | None = None,
    id: str | None = None,  # noqa: A002 - the label is called "id"
) -> StatsSource:
    """Wrap an object with ``stats()`` as a :class:`StatsSource`; labels are guessed unless given.

    Guesses: role from the class name (``Producer`` → ``producer``,
    ``TGBDataset``/``DataLoader`` → ``consumer``, ``Mix`` → ``mix``), id from
    ``producer_id``, ``id``, ``rank`` or ``name`` (a ``Mix``: its sources'
    names), else the class name — never an object address, which would start
    new series at every restart —, namespace from
    ``namespace``/``ns``/``url``/``store.url`` with credentials removed.
    """
    if isinstance(obj, StatsSource):
        if namespace is None and role is None and id is None:
            return obj
        return StatsSource(
            obj.stats,
            _safe_namespace(namespace) if namespace is not None else obj.namespace,
            role if role is not None else obj.role,
            id if id is not None else obj.id,
        )
    stats = getattr(obj, "stats", None)
    if not callable(stats):
        raise TypeError(f"{type(obj).__name__} has no stats() method")
    return StatsSource(
        stats=stats,
        namespace=_safe_namespace(namespace) if namespace is not None else _guess_namespace(obj),
        role=role if role is not None else _guess_role(obj),
        id=id if id is not None else _guess_id(obj),
    )


def finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


class SourceSet:
    """The sources an exporter reports, safe to change from other threads while it reads them."""

    def __init__(self, sources: Iterable[HasStats | StatsSource] = ()) -> None:
        self._lock = threading.Lock()
        self._sources: list[StatsSource] = [as_source(s) for s in sources]

    def add(self, source: HasStats | StatsSource, **labels: Unpack[Labels]) -> StatsSource:
        """Register ``source``; returns the wrapped :class:`StatsSource` (for :meth:`remove`)."""
        wrapped = as_source(source, **labels)
        with self._lock:
            self._sources.append(wrapped)
        return wrapped

    def remove(self, source: StatsSource) -> None:
        with self._lock:
            self._sources = [s for s in self._sources if s is not source]

    def snapshot(self) -> list[StatsSource]:
        with self._lock:
            return list(self._sources)
