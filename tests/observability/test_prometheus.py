"""The Prometheus collector, scraped over HTTP from a loopback endpoint on a free port."""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

import pytest

prometheus_client = pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from torch_tgb.observability import TGBCollector, as_source, start_metrics_server  # noqa: E402
from torch_tgb.observability.prometheus import metric_name  # noqa: E402


@dataclass(frozen=True)
class _ProducerStats:
    commit_attempts: int
    commit_conflicts: int
    paused_for_lag: bool


@dataclass(frozen=True)
class _ConsumerStats:
    bytes_read: int
    stall_seconds: float


class _Src:
    def __init__(self, snap) -> None:
        self.snap = snap

    def stats(self):
        return self.snap


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_http_scrape_exports_fields_as_labelled_gauges():
    registry = CollectorRegistry()
    producer = _Src(_ProducerStats(commit_attempts=5, commit_conflicts=1, paused_for_lag=False))
    consumer = _Src(_ConsumerStats(bytes_read=4096, stall_seconds=0.5))
    collector = TGBCollector(registry=registry)
    collector.add(producer, namespace="s3://user:secret@b/ns", role="producer", id="p0")
    collector.add(consumer, namespace="s3://b/ns", role="consumer", id="r1")
    server, port = start_metrics_server(0, registry=registry)
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
        # a later scrape sees new values: stats() is called at scrape time
        producer.snap = _ProducerStats(commit_attempts=6, commit_conflicts=1, paused_for_lag=True)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body2 = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    plabels = (("id", "p0"), ("namespace", "s3://b/ns"), ("role", "producer"))
    clabels = (("id", "r1"), ("namespace", "s3://b/ns"), ("role", "consumer"))
    samples = _samples(body)
    assert samples[("tgb_commit_attempts", plabels)] == 5
    assert samples[("tgb_commit_conflicts", plabels)] == 1
    assert samples[("tgb_paused_for_lag", plabels)] == 0
    assert samples[("tgb_bytes_read", clabels)] == 4096
    assert samples[("tgb_stall_seconds", clabels)] == 0.5
    assert "secret" not in body
    samples2 = _samples(body2)
    assert samples2[("tgb_commit_attempts", plabels)] == 6
    assert samples2[("tgb_paused_for_lag", plabels)] == 1


def test_broken_source_does_not_break_scrape():
    class Broken:
        def stats(self):
            raise RuntimeError("x")

    registry = CollectorRegistry()
    collector = TGBCollector([as_source(Broken(), namespace="n", role="producer", id="b")], registry=registry)
    collector.add(_Src(_ConsumerStats(bytes_read=1, stall_seconds=0.0)), namespace="n", role="consumer", id="c")
    assert registry.get_sample_value("tgb_bytes_read", {"namespace": "n", "role": "consumer", "id": "c"}) == 1
    collector.unregister()
    assert registry.get_sample_value("tgb_bytes_read", {"namespace": "n", "role": "consumer", "id": "c"}) is None


def test_metric_names_are_sanitised():
    assert metric_name("tgb", "fetch-latency.p99") == "tgb_fetch_latency_p99"
    assert metric_name("", "9lives") == "_9lives"


def test_missing_prometheus_client_names_the_extra(monkeypatch):
    import sys

    from torch_tgb.errors import TGBError

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now raises ImportError
    with pytest.raises(TGBError, match=r"torch-tgb\[prometheus\]"):
        TGBCollector(registry=CollectorRegistry())
