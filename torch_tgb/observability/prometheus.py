"""Prometheus export of ``stats()`` snapshots (optional extra ``prometheus``).

:class:`TGBCollector` is a ``prometheus_client`` custom collector: on every
scrape it calls each source's ``stats()`` and turns every numeric field into a
gauge ``<prefix>_<field>`` with labels ``namespace``, ``role`` and ``id``.
It knows no field names, so new fields in a producer's or consumer's stats
appear without any change here. ``prometheus_client`` is imported only when
this module is used; without it, a clear error says which extra to install.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING

from torch_tgb.errors import TGBError
from torch_tgb.observability._fields import HasStats, SourceSet, StatsSource, finite

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry
    from typing_extensions import Unpack

    from torch_tgb.observability._fields import Labels

__all__ = ["LABELS", "TGBCollector", "start_metrics_server"]

#: label names of every exported gauge
LABELS = ("namespace", "role", "id")

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def _prometheus() -> ModuleType:
    try:
        import prometheus_client
    except ImportError as e:
        raise TGBError(
            "Prometheus export needs prometheus_client: pip install 'torch-tgb[prometheus]'"
        ) from e
    return prometheus_client


def metric_name(prefix: str, field: str) -> str:
    """A valid Prometheus metric name for ``field`` (invalid characters become ``_``)."""
    name = _INVALID.sub("_", f"{prefix}_{field}" if prefix else field)
    return name if not name[:1].isdigit() else f"_{name}"


class TGBCollector:
    """Exports the ``stats()`` of registered sources as labelled gauges on each scrape.

    ``registry`` defaults to ``prometheus_client.REGISTRY``; pass
    ``register=False`` to register it yourself.
    """

    def __init__(
        self,
        sources: Iterable[HasStats | StatsSource] = (),
        *,
        prefix: str = "tgb",
        registry: CollectorRegistry | None = None,
        register: bool = True,
    ) -> None:
        self._prom = _prometheus()
        self.prefix = prefix
        # scrapes run on the HTTP server's threads while sources are added
        self._sources = SourceSet(sources)
        self.registry = registry if registry is not None else self._prom.REGISTRY
        if register:
            self.registry.register(self)

    def add(self, source: HasStats | StatsSource, **labels: Unpack[Labels]) -> StatsSource:
        return self._sources.add(source, **labels)

    def remove(self, source: StatsSource) -> None:
        self._sources.remove(source)

    def unregister(self) -> None:
        self.registry.unregister(self)

    def describe(self) -> list[Metric]:
        # Returning nothing tells the registry not to call collect() at
        # registration time (sources may not be ready, and names are dynamic).
        return []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        sources = self._sources.snapshot()
        families: dict[str, GaugeMetricFamily] = {}
        for source in sources:
            try:
                fields = source.fields()
            except Exception:  # noqa: BLE001 - one broken source must not break the scrape
                continue
            for field, value in fields.items():
                if not finite(value):
                    continue
                name = metric_name(self.prefix, field)
                family = families.get(name)
                if family is None:
                    family = families[name] = GaugeMetricFamily(
                        name, f"torch_tgb stats field {field!r}", labels=LABELS
                    )
                family.add_metric(list(source.labels()), value)
        yield from families.values()


def start_metrics_server(
    port: int = 0, *, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> tuple[WSGIServer, int]:
    """Serve ``/metrics`` over HTTP on a daemon thread; returns ``(server, port)``.

    ``port=0`` picks a free port. Binds to loopback by default: exposing
    metrics beyond the host is an explicit choice (``addr="0.0.0.0"``).
    Stop with ``server.shutdown(); server.server_close()``.
    """
    prom = _prometheus()
    server, _thread = prom.start_http_server(port, addr=addr, registry=registry or prom.REGISTRY)
    return server, int(server.server_port)
