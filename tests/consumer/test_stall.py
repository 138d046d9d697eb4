"""Input stall as a metric: the training thread's wait per step, its share of the step, and a rate-limited warning."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

import torch_tgb as tgb
from torch_tgb.consumer import StallPolicy
from torch_tgb.consumer._finish import Finish
from torch_tgb.datapipes.read.stall import StallClock

STALL_LOGGER = "torch_tgb.stall"


def steps(clock: StallClock, n: int, *, wait: float, work: float, at: float = 0.0) -> float:
    """``n`` steps of a loop that works ``work`` seconds, then waits ``wait`` for its batch; returns the time after."""
    for _ in range(n):
        at += work
        clock.waited(at, at + wait)
        at += wait
    return at


def test_figures_of_a_loop_waiting_a_quarter_of_each_step() -> None:
    clock = StallClock(StallPolicy(share=None))
    steps(clock, 10, wait=0.25, work=0.75)
    figures = clock.figures()
    assert clock.steps == 10
    assert figures["stall_s"] == pytest.approx(2.5)
    assert figures["stall_per_step_s"] == pytest.approx(0.25)
    assert figures["stall_share"] == pytest.approx(0.25)  # the first wait (the open) is not a share of a step


def test_the_warning_fires_once_per_interval(caplog) -> None:
    clock = StallClock(StallPolicy(share=0.1, window=5, every_s=10.0), what="ns")
    with caplog.at_level(logging.WARNING, logger=STALL_LOGGER):
        at = steps(clock, 30, wait=0.2, work=0.1)  # 9 s of steps waiting 2/3 of the time: one warning
        assert len(caplog.records) == 1
        assert "ns: the training loop waited 67% of its step time" in caplog.records[0].getMessage()
        at = steps(clock, 6, wait=0.2, work=0.1, at=at + 2.0)  # past the interval: one more
        assert len(caplog.records) == 2


def test_no_warning_below_the_share_or_without_a_share(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=STALL_LOGGER):
        steps(StallClock(StallPolicy(share=0.1, window=5, every_s=0.0)), 50, wait=0.005, work=0.1)
        steps(StallClock(StallPolicy(share=None, window=5, every_s=0.0)), 50, wait=0.5, work=0.1)
        steps(StallClock(None), 50, wait=0.5, work=0.1)
        steps(StallClock(StallPolicy(share=0.1, window=5, every_s=0.0)), 50, wait=0.0005, work=0.0001)  # < 1 ms
    assert not caplog.records


def test_stall_policy_refuses_nonsense() -> None:
    for bad in ({"share": 1.0}, {"share": -0.1}, {"window": 0}, {"every_s": -1.0}, {"min_wait_s": -1.0}):
        with pytest.raises(ValueError):
            StallPolicy(**bad)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ns(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("stall") / "ns")
    tokens = np.random.default_rng(0).integers(1, 1000, size=24 * 4 * 16 + 1).astype(np.uint16)
    tgb.write_dataset(path, tokens, layout=tgb.Layout(dp=1), seq_len=16, global_batch_size=4, packing="none",
                      progress=False)
    return path


class VirtualClock:
    """``time.perf_counter`` plus virtual seconds a test adds: the figures then hang on those seconds, not the box's load."""

    def __init__(self) -> None:
        self.real = time.perf_counter
        self.offset = 0.0

    def __call__(self) -> float:
        return self.real() + self.offset


@pytest.mark.parametrize("through_loader", [False, True])
def test_a_slow_source_grows_the_stall_and_warns(ns, monkeypatch, caplog, through_loader) -> None:
    clock = VirtualClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    rows = Finish.rows
    read_s = [0.0]  # virtual seconds each step's read takes

    def slow_rows(self, piece):  # noqa: ANN001, ANN202
        clock.offset += read_s[0]
        return rows(self, piece)

    monkeypatch.setattr(Finish, "rows", slow_rows)

    def run(read: float) -> tgb.ConsumerStats:
        read_s[0] = read
        policy = StallPolicy(share=0.5, window=4, every_s=3600.0)
        reader = (tgb.DataLoader if through_loader else tgb.TGBDataset)(ns, tgb.Mesh(0, 1), stall=policy,
                                                                         open_cache=False)
        for _ in reader:
            clock.offset += 1.0  # the training step: one virtual second
        return reader.stats()

    with caplog.at_level(logging.WARNING, logger=STALL_LOGGER):
        fast = run(0.0)  # reads take real milliseconds: a sliver of a 1 s step
        assert not caplog.records
        slow = run(9.0)  # each read takes 9 s of a 10 s step
    assert slow.steps == fast.steps >= 20
    assert slow.stall_per_step_s >= 9.0 > 1.0 > fast.stall_per_step_s
    assert slow.stall_share > 0.85 > 0.2 > fast.stall_share
    assert slow.stall_s == pytest.approx(slow.stall_per_step_s * slow.steps)
    # once per interval (3600 s: 200 s of steps), from the one clock that watches the training thread
    assert len(caplog.records) == 1
    assert "of its step time for data over the last 4 steps" in caplog.records[0].getMessage()


def test_stall_fields_reach_prometheus(ns) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from torch_tgb.observability import TGBCollector

    reader = tgb.TGBDataset(ns, tgb.Mesh(0, 1))
    for _ in reader:
        pass
    registry = prometheus_client.CollectorRegistry()
    collector = TGBCollector(registry=registry)
    collector.add(reader, namespace=ns, role="consumer", id="r0")
    text = prometheus_client.generate_latest(registry).decode()
    assert "tgb_stall_share{" in text and "tgb_stall_per_step_s{" in text
