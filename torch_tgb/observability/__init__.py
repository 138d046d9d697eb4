"""Observability: log and export the ``stats()`` of producers and consumers.

- :func:`stats_fields` reads any stats snapshot (a frozen dataclass of flat
  numeric fields) as ``name → float``.
- :class:`StatsReporter` logs them through :mod:`logging` every N seconds.
- :class:`TGBCollector` / :func:`start_metrics_server` export them to
  Prometheus (extra ``prometheus``), gauges labelled namespace/role/id.
"""

from __future__ import annotations

from typing import Any

from torch_tgb.observability._fields import HasStats, StatsSource, as_source, stats_fields
from torch_tgb.observability.reporter import StatsReporter, format_stats

__all__ = [
    "HasStats",
    "StatsReporter",
    "StatsSource",
    "TGBCollector",
    "as_source",
    "format_stats",
    "start_metrics_server",
    "stats_fields",
]


def __getattr__(name: str) -> Any:
    # prometheus_client is optional: import the exporter only when asked for
    if name in ("TGBCollector", "start_metrics_server"):
        from torch_tgb.observability import prometheus

        return getattr(prometheus, name)
    raise AttributeError(f"module 'torch_tgb.observability' has no attribute {name!r}")
