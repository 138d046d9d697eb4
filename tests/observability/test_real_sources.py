"""The exporters on the real Producer and TGBDataset stats (field names not hard-coded in the package)."""

from __future__ import annotations

import logging
import urllib.request

import pytest

import torch_tgb as tgb
import torch_tgb.cli.main as cli_main
from torch_tgb.cli._produce_impl import synthetic_batch
from torch_tgb.observability import StatsReporter, stats_fields

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from torch_tgb.observability import TGBCollector, start_metrics_server  # noqa: E402


def test_producer_and_dataset_scraped_over_http(tmp_path):
    ns = str(tmp_path / "ns")
    layout = tgb.Layout(dp=1, seq_keys=("input_ids", "labels"))
    registry = CollectorRegistry()
    collector = TGBCollector(registry=registry)
    with tgb.Producer(ns, producer_id="p0", layout=layout, commit_policy="naive") as producer:
        collector.add(producer)
        for offset in range(4):
            producer.append(synthetic_batch(offset, global_batch=2, seq_len=8, vocab_size=50, seed=0), offset=offset)
        producer.close(seal=True)
        dataset = tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), timeout=10)
        collector.add(dataset, id="rank0")
        assert len(list(dataset)) == 4
        server, port = start_metrics_server(0, registry=registry)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                text = response.read().decode()
        finally:
            server.shutdown()
            server.server_close()
    samples = {
        (s.name, s.labels["role"], s.labels["id"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    producer_fields = stats_fields(producer.stats())
    consumer_fields = stats_fields(dataset.stats())
    # every numeric field of both snapshots is exported under its own name, with the right labels
    for name, value in producer_fields.items():
        assert samples[(f"tgb_{name}", "producer", "p0")] == pytest.approx(value)
    for name in consumer_fields:
        assert (f"tgb_{name}", "consumer", "rank0") in samples
    assert samples[("tgb_steps", "consumer", "rank0")] == 4
    assert producer_fields["appended"] == 4


def test_produce_logs_stats_periodically(tmp_path, caplog):
    # the raw line goes to the torch_tgb.stats logger at DEBUG (tgb -vv); stderr has the short one
    with caplog.at_level(logging.DEBUG, logger="torch_tgb.stats"):
        code = cli_main.main(
            ["produce", str(tmp_path / "ns"), "--steps", "3", "--global-batch", "2", "--seq-len", "4",
             "--stats-interval", "3600", "--producer-id", "logged"]
        )
    assert code == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "torch_tgb.stats"]
    # the interval is long: the line comes from the final report when the run ends
    assert len(lines) == 1 and lines[0].startswith("tgb stats producer logged ns=file://")
    assert "appended=3" in lines[0]


def test_reporter_over_real_producer_never_breaks_on_closed_source(tmp_path, caplog):
    ns = str(tmp_path / "ns")
    producer = tgb.Producer(ns, producer_id="p1", layout=tgb.Layout(dp=1), commit_policy="naive")
    producer.close()
    with caplog.at_level(logging.INFO, logger="torch_tgb.stats"):
        lines = StatsReporter([producer], interval=60).report_once()
    assert len(lines) == 1 and "producer p1" in lines[0]
