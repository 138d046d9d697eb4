from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import pytest

from torch_tgb.observability import StatsReporter, as_source


@dataclass(frozen=True)
class _Stats:
    steps: int
    stall_s: float


class _Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.called = threading.Event()

    def stats(self) -> _Stats:
        self.calls += 1
        if self.calls >= 2:
            self.called.set()
        return _Stats(steps=self.calls, stall_s=0.125)


class _Broken:
    def stats(self):
        raise RuntimeError("no stats today")


def test_report_once_logs_one_line_per_source(caplog):
    src = as_source(_Counter(), namespace="file:///ns", role="consumer", id="r0")
    reporter = StatsReporter([src], interval=60)
    with caplog.at_level(logging.INFO, logger="torch_tgb.stats"):
        lines = reporter.report_once()
    assert lines == ["tgb stats consumer r0 ns=file:///ns: steps=1 stall_s=0.125"]
    assert [r.getMessage() for r in caplog.records] == lines


def test_thread_reports_periodically_and_once_on_stop(caplog):
    counter = _Counter()
    with caplog.at_level(logging.INFO, logger="torch_tgb.stats"):
        with StatsReporter([as_source(counter, namespace="m", role="producer", id="p0")], interval=0.01):
            assert counter.called.wait(10), "reporter thread never called stats() twice"
        calls_at_stop = counter.calls
    # the final report on stop happened after the thread ended
    assert calls_at_stop >= 3
    assert caplog.records[-1].getMessage().startswith("tgb stats producer p0 ns=m: steps=")


def test_broken_source_is_a_warning_and_others_still_report(caplog):
    good = as_source(_Counter(), namespace="n", role="consumer", id="ok")
    bad = as_source(_Broken(), namespace="n", role="producer", id="bad")
    reporter = StatsReporter([bad, good], interval=60)
    with caplog.at_level(logging.INFO, logger="torch_tgb.stats"):
        lines = reporter.report_once()
    assert len(lines) == 1 and "consumer ok" in lines[0]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no stats today" in warnings[0].getMessage()


def test_add_remove_and_bad_interval():
    reporter = StatsReporter(interval=1)
    src = reporter.add(_Counter(), namespace="n", role="r", id="1")
    assert reporter.sources == [src]
    reporter.remove(src)
    assert reporter.report_once() == []
    with pytest.raises(ValueError):
        StatsReporter(interval=0)
