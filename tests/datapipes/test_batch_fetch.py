"""Batched remote reads with an error budget: soft failures re-read, hard ones raised, counters kept."""

from __future__ import annotations

import uuid

import pytest
import torch

from torch_tgb.consumer import TGBDataset
from torch_tgb.consumer import ReaderOptions
from torch_tgb.datapipes import ErrorBudget, ReadStats, fetch_ranges
from torch_tgb.errors import ObjectNotFound, StorageError, TransientStorageError
from torch_tgb.layout import Layout, Mesh
from torch_tgb.observability import stats_fields
from torch_tgb.producer import Producer
from torch_tgb.storage import ForwardingStore, MemoryStore, RangeRequest


class Flaky(ForwardingStore):
    """Fails the first ``times`` reads of each key in ``keys`` with ``error``; counts batched calls."""

    def __init__(self, inner, keys, error, times: int) -> None:
        super().__init__(inner)
        self.keys, self.error, self.left = set(keys), error, {k: times for k in keys}
        self.calls: list[int] = []

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if key in self.keys and self.left[key] > 0:
            self.left[key] -= 1
            raise self.error(f"{key}: injected")
        return self.inner.get_range(key, start, end)

    def get_ranges(self, requests, *, continue_on_error=False):
        self.calls.append(len(requests))
        return super().get_ranges(requests, continue_on_error=continue_on_error)


@pytest.fixture
def store():
    s = MemoryStore(f"bf-{uuid.uuid4().hex}")
    for i in range(4):
        s.put(f"data/o{i}", bytes(range(i, i + 100)))
    yield s
    s.destroy()


REQUESTS = [RangeRequest(f"data/o{i}", 10, 20) for i in range(4)]
NO_WAIT = ErrorBudget(backoff_s=0)


@pytest.mark.parametrize("error", [TransientStorageError, ObjectNotFound])
def test_soft_failures_are_reread_in_one_batched_call(store, error) -> None:
    flaky = Flaky(store, ["data/o1", "data/o3"], error, times=2)
    stats = ReadStats()
    out = fetch_ranges(flaky, REQUESTS, budget=NO_WAIT, stats=stats)
    assert out == [bytes(range(i + 10, i + 20)) for i in range(4)]  # in request order
    assert flaky.calls == [4, 2, 2]  # the first call, then only the failed ranges, batched
    snap = stats.snapshot()
    assert (snap.soft_errors, snap.retries, snap.hard_errors) == (4, 4, 0)


def test_a_hard_failure_is_raised_at_once(store) -> None:
    flaky = Flaky(store, ["data/o2"], StorageError, times=1)  # e.g. permission denied
    stats = ReadStats()
    with pytest.raises(StorageError, match="o2: injected"):
        fetch_ranges(flaky, REQUESTS, budget=NO_WAIT, stats=stats)
    assert flaky.calls == [4] and stats.snapshot().hard_errors == 1 and stats.snapshot().retries == 0


def test_the_soft_error_limit_bounds_a_call(store) -> None:
    flaky = Flaky(store, ["data/o0", "data/o1", "data/o2"], TransientStorageError, times=5)
    with pytest.raises(TransientStorageError, match="exceed the budget of 4"):
        fetch_ranges(flaky, REQUESTS, budget=ErrorBudget(soft_limit=4, attempts=10, backoff_s=0))
    with pytest.raises(ObjectNotFound, match="after 1 re-reads"):
        fetch_ranges(Flaky(store, ["data/o0"], ObjectNotFound, times=5), REQUESTS,
                     budget=ErrorBudget(soft_limit=100, attempts=1, backoff_s=0))


def test_backoff_doubles(store) -> None:
    waits: list[float] = []
    fetch_ranges(Flaky(store, ["data/o0"], TransientStorageError, times=3), REQUESTS,
                 budget=ErrorBudget(backoff_s=0.5), sleep=waits.append)
    assert waits == [0.5, 1.0, 2.0]


def test_budget_is_checked() -> None:
    with pytest.raises(ValueError):
        ErrorBudget(soft_limit=-1)


def test_remote_read_ahead_batches_steps_and_counts_errors_in_stats() -> None:
    inner = MemoryStore(f"bf-{uuid.uuid4().hex}")
    with Producer(inner, producer_id="p", layout=Layout(dp=2), commit_policy="fixed:8") as p:
        for offset in range(16):
            p.append({"x": torch.full((2, 4), offset, dtype=torch.int32)}, offset=offset)
        p.close(seal=True)
    keys = [k for k in inner.list("data/")][:3]
    flaky = Flaky(inner, keys, TransientStorageError, times=1)
    ds = TGBDataset(flaky, mesh=Mesh(1, 2), prefetch=4, options=ReaderOptions(errors=NO_WAIT))
    got = [int(b["x"][0, 0]) for b in ds]
    assert got == list(range(16))
    snap = ds.stats()
    assert snap.soft_errors >= 3 and snap.retries >= 3 and snap.hard_errors == 0
    data_calls = [n for n in flaky.calls if n > 1]
    assert data_calls, "upcoming steps' ranges go out together"
    fields = stats_fields(snap)
    assert {"soft_errors", "hard_errors", "retries"} <= set(fields)  # exported as metrics too
