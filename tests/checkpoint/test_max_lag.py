"""max_lag end to end: a real Producer stalls at the bound and resumes after a newer watermark."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import torch

from torch_tgb.checkpoint import Reclaimer, keep_last, record_watermark
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.producer import Producer
from torch_tgb.producer.config import ProducerConfig
from torch_tgb.storage import MemoryStore

MAX_LAG = 6
TOTAL = 20


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def stalled(producer: Producer, appended: list[int], at: int) -> bool:
    """Paused, with exactly ``at`` batches appended and nothing pending."""
    s = producer.stats()
    return producer.paused and len(appended) == at and s.pending == 0 and s.committed_steps == at


@pytest.fixture
def store():
    s = MemoryStore(f"lag-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def test_producer_stalls_at_max_lag_and_resumes_after_watermark(store):
    producer = Producer(store, producer_id="p0", layout=Layout(dp=2), commit_policy="naive", max_lag=MAX_LAG,
                        config=ProducerConfig(lag_poll_s=0.02, lag_poll_max_s=0.05))
    appended: list[int] = []

    def produce() -> None:
        for offset in range(TOTAL):
            producer.append({"x": torch.full((4, 3), offset, dtype=torch.int32)})
            appended.append(offset)
        producer.flush()

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    # no watermark yet: the boundary is step 0, so the producer stops at MAX_LAG steps
    wait_until(lambda: stalled(producer, appended, MAX_LAG))
    time.sleep(0.2)  # and stays there
    assert stalled(producer, appended, MAX_LAG)
    assert Manifest(store).head().num_steps == MAX_LAG

    record_watermark(store, "ck-4", {"tgb_cursor": {"step": 4, "version": 1}})
    wait_until(lambda: stalled(producer, appended, 4 + MAX_LAG))
    # reclamation does not change the bound: the boundary is the watermark, not the GC boundary
    report = Reclaimer(store).run_once()
    assert report.safe_step == 4 and report.objects == 4
    time.sleep(0.2)
    assert stalled(producer, appended, 4 + MAX_LAG)

    record_watermark(store, "ck-8", {"tgb_cursor": {"step": 8, "version": 1}})
    time.sleep(0.2)  # the boundary is the *smallest* live cursor: ck-4 still holds it
    assert stalled(producer, appended, 4 + MAX_LAG)
    assert keep_last(store, 1) == ["ck-4"]
    wait_until(lambda: stalled(producer, appended, 8 + MAX_LAG))

    record_watermark(store, "ck-end", {"tgb_cursor": {"step": TOTAL, "version": 1}})
    keep_last(store, 1)
    thread.join(20)
    assert not thread.is_alive()
    assert appended == list(range(TOTAL))
    s = producer.stats()
    assert not producer.paused and s.paused_for_lag_s > 0.3
    producer.close()
    assert Manifest(store).head().num_steps == TOTAL


def test_a_pause_for_max_lag_is_never_silent(store, caplog):
    """A producer held by max_lag logs why, every lag_warn_s: no checkpoint at all, then the one holding it."""
    producer = Producer(store, producer_id="p0", layout=Layout(dp=2), commit_policy="naive", max_lag=2,
                        config=ProducerConfig(lag_poll_s=0.02, lag_poll_max_s=0.05, lag_warn_s=0.1))
    appended: list[int] = []

    def produce() -> None:
        for offset in range(6):
            producer.append({"x": torch.full((4, 3), offset, dtype=torch.int32)})
            appended.append(offset)
        producer.flush()

    thread = threading.Thread(target=produce, daemon=True)
    with caplog.at_level("WARNING", logger="torch_tgb.producer._commit_loop"):
        thread.start()
        wait_until(lambda: "no live checkpoint is recorded" in caplog.text)
        assert "producer 'p0' paused" in caplog.text and "by max_lag=2: 2 steps committed or pending" in caplog.text
        record_watermark(store, "ck-1", {"tgb_cursor": {"step": 1, "version": 1}})
        wait_until(lambda: "the oldest of 1 live checkpoint(s) resumes at step 1" in caplog.text)
        record_watermark(store, "ck-end", {"tgb_cursor": {"step": 6, "version": 1}})
        keep_last(store, 1)
        thread.join(20)
    assert not thread.is_alive() and appended == list(range(6))
    producer.close()


def test_a_paused_producer_polls_the_watermarks_less_and_less_often(store):
    """A pause lasts until the next checkpoint (minutes): the poll backs off to lag_poll_max_s, sparing the store."""
    from torch_tgb.testing.counting import CountingStore

    counting = CountingStore(store)
    producer = Producer(counting, producer_id="p0", layout=Layout(dp=2), commit_policy="naive", max_lag=1,
                        config=ProducerConfig(lag_poll_s=0.01, lag_poll_max_s=0.16, lag_warn_s=None))
    producer.append({"x": torch.zeros((4, 3), dtype=torch.int32)})
    thread = threading.Thread(target=producer.append, args=({"x": torch.ones((4, 3), dtype=torch.int32)},),
                              daemon=True)
    thread.start()
    wait_until(lambda: producer.paused)
    counting.reset()
    time.sleep(1.5)
    polls = counting.calls["list"]  # each poll lists the watermarks and the retired ids
    assert 4 <= polls <= 60, polls  # at a fixed 10 ms it would be ~300
    record_watermark(store, "ck-1", {"tgb_cursor": {"step": 1, "version": 1}})
    thread.join(5)
    assert not thread.is_alive()
    producer.close()
