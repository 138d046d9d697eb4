"""``StatsReporter``: log the ``stats()`` of producers and consumers every N seconds.

A daemon thread wakes every ``interval`` seconds and writes one log line per
source through :mod:`logging` (logger ``torch_tgb.stats`` by default)::

    tgb stats producer p0 ns=file:///data/run: commit_attempts=12 commit_successes=11 ...

Logging (not print) means the lines go wherever the application's logging
goes, with its levels and handlers; nothing is written when the logger is
disabled. A source whose ``stats()`` raises is logged as a warning and
skipped; the reporter keeps running.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from torch_tgb.observability._fields import HasStats, SourceSet, StatsSource

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from torch_tgb.observability._fields import Labels

__all__ = ["StatsReporter", "format_stats"]


def _format_value(value: float) -> str:
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def format_stats(source: StatsSource, fields: dict[str, float]) -> str:
    """One line: ``tgb stats <role> <id> ns=<namespace>: k=v k=v ...``."""
    body = " ".join(f"{k}={_format_value(v)}" for k, v in fields.items())
    return f"tgb stats {source.role} {source.id} ns={source.namespace}: {body}"


class StatsReporter:
    """Logs every source's ``stats()`` every ``interval`` seconds on a daemon thread.

    Use as a context manager (``with StatsReporter([producer], interval=30):``)
    or call :meth:`start` / :meth:`stop`. :meth:`report_once` logs right away
    (also done once more on stop, so short runs leave a final line).
    """

    def __init__(
        self,
        sources: Iterable[HasStats | StatsSource] = (),
        *,
        interval: float = 60.0,
        logger: logging.Logger | str = "torch_tgb.stats",
        level: int = logging.INFO,
        report_on_stop: bool = True,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"StatsReporter interval must be positive, got {interval!r}")
        self.interval = float(interval)
        self.level = level
        self.report_on_stop = report_on_stop
        self._logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        # sources are added and removed from other threads while the reporter runs
        self._sources = SourceSet(sources)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, source: HasStats | StatsSource, **labels: Unpack[Labels]) -> StatsSource:
        """Start reporting ``source``; returns the wrapped :class:`StatsSource` (for :meth:`remove`)."""
        return self._sources.add(source, **labels)

    def remove(self, source: StatsSource) -> None:
        self._sources.remove(source)

    @property
    def sources(self) -> list[StatsSource]:
        return self._sources.snapshot()

    def report_once(self) -> list[str]:
        """Log one line per source now; returns the lines (also when the logger filters them)."""
        lines = []
        for source in self.sources:
            try:
                fields = source.fields()
            except Exception as e:  # noqa: BLE001 - a failing source must not stop the others
                self._logger.warning("tgb stats %s %s: stats() failed: %r", source.role, source.id, e)
                continue
            line = format_stats(source, fields)
            lines.append(line)
            self._logger.log(self.level, "%s", line)
        return lines

    def start(self) -> StatsReporter:
        if self._thread is not None:
            raise RuntimeError("StatsReporter already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="tgb-stats-reporter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()
        if self.report_on_stop:
            self.report_once()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.report_once()

    def __enter__(self) -> StatsReporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
