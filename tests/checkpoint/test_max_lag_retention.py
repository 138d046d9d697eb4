"""max_lag smaller than (checkpoint interval x checkpoints kept) deadlocks a job: said at start and while paused.

Issue 40 ("Docs that did not hold"): a trainer keeping K checkpoints every C
steps holds the safe boundary (K - 1) * C steps behind its newest
checkpoint and must read C steps past it to save the next one; a producer
with max_lag < C * K pauses before those steps exist, the trainer waits for
data, and neither moves (the issue's run: producer paused 485 s, trainer
DataTimeout). The live watermarks show C and K: the producer warns at start
and its pause warning names the cause and the rule.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from torch_tgb.checkpoint import keep_last, record_watermark
from torch_tgb.layout import Layout
from torch_tgb.manifest.watermarks import MAX_LAG_RULE, Retention, Watermark
from torch_tgb.producer import Producer
from torch_tgb.producer.config import ProducerConfig
from torch_tgb.storage import MemoryStore

pytestmark = pytest.mark.timeout(120)


def marks(*steps: int) -> list[Watermark]:
    return [Watermark(f"ck-{s}", s, 1) for s in steps]


@given(k=st.integers(2, 8), c=st.integers(1, 1000), first=st.integers(0, 10**6), extra=st.integers(-5, 5))
def test_evenly_spaced_checkpoints_need_interval_times_kept(k: int, c: int, first: int, extra: int) -> None:
    retention = Retention.of(marks(*[first + i * c for i in reversed(range(k))]))
    assert retention.interval == c and retention.lag_needed == k * c
    max_lag = max(1, k * c + extra)
    shortfall = retention.shortfall(max_lag)
    assert (shortfall is None) == (max_lag >= k * c)
    if shortfall is not None:
        assert f"max_lag >= {k * c}" in shortfall and MAX_LAG_RULE in shortfall


def test_fewer_than_two_live_checkpoints_tell_nothing() -> None:
    assert Retention.of([]).shortfall(1) is None and Retention.of(marks(50)).shortfall(1) is None
    assert Retention.of(marks(10, 10)).lag_needed is None  # one step, recorded twice
    assert Retention.of(marks(0, 10, 30)).lag_needed == 50  # uneven: the largest gap is the interval


@pytest.fixture
def store():
    s = MemoryStore(f"retention-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def test_a_producer_warns_at_start_when_max_lag_is_below_the_retention(store, caplog) -> None:
    for step in (0, 10, 20):  # keep_last(3), a checkpoint every 10 steps: needs max_lag >= 30
        record_watermark(store, f"ck-{step}", {"tgb_cursor": {"step": step, "version": 0}})
    with caplog.at_level("WARNING", logger="torch_tgb.producer.producer"):
        Producer(store, producer_id="p0", layout=Layout(dp=1), max_lag=25).close()
    assert "max_lag=25 is below what the trainer's retention needs" in caplog.text
    assert "need max_lag >= 30" in caplog.text and MAX_LAG_RULE in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="torch_tgb.producer.producer"):
        Producer(store, producer_id="p0", layout=Layout(dp=1), max_lag=30).close()
        Producer(store, producer_id="p0", layout=Layout(dp=1)).close()  # no max_lag: nothing to say
    assert "retention" not in caplog.text


def test_the_pause_of_a_deadlocked_job_names_the_cause_and_the_rule(store, caplog) -> None:
    """Checkpoints every 4 steps, 2 kept (needs 8), max_lag=6: the trainer can never save at step 8."""
    producer = Producer(store, producer_id="p0", layout=Layout(dp=1), commit_policy="naive", max_lag=6,
                        config=ProducerConfig(lag_poll_s=0.02, lag_poll_max_s=0.05, lag_warn_s=0.1))
    appended: list[int] = []

    def produce() -> None:
        for offset in range(12):
            producer.append({"x": torch.full((2, 3), offset, dtype=torch.int32)})
            appended.append(offset)
        producer.flush()

    thread = threading.Thread(target=produce, daemon=True)
    with caplog.at_level("WARNING", logger="torch_tgb.producer._commit_loop"):
        for step in (0, 4):  # the trainer saved at 0 and 4 (keep_last(2)) and now needs steps up to 7
            record_watermark(store, f"ck-{step}", {"tgb_cursor": {"step": step, "version": 0}})
        thread.start()
        deadline = time.monotonic() + 30
        while "is below what the trainer's retention needs" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.02)
        assert len(appended) == 6 and producer.paused  # steps 6 and 7 never come: the deadlock
        assert "need max_lag >= 8" in caplog.text and "next checkpoint at step 8" in caplog.text and "producers stop at step 6" in caplog.text
        record_watermark(store, "ck-end", {"tgb_cursor": {"step": 12, "version": 0}})
        keep_last(store, 1)
        thread.join(20)
    assert not thread.is_alive() and appended == list(range(12))
    producer.close()
