"""Injected faults surface only when retries are exhausted, with a message naming what failed.

Below the limit the same faults are invisible (the chaos trials run with 5%
of them on every call); here every call of one operation fails, so each
component must give up after ``RetryPolicy.attempts`` and say so.
"""

from __future__ import annotations

import time

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.errors import TransientStorageError
from torch_tgb.storage import FaultPlan, FaultRates, FaultyStore, LocalStore, RetryingStore, RetryPolicy

LAYOUT = tgb.Layout(dp=1)
POLICY = RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01)


def _store(root: str, op: str, kind: str) -> tuple[FaultyStore, RetryingStore]:
    faulty = FaultyStore(LocalStore(root), FaultPlan(seed=1, ops={op: FaultRates(**{kind: 1.0})}))
    return faulty, RetryingStore(faulty, POLICY)


def _fill(root: str, n: int = 3) -> None:
    with tgb.Producer(root, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        for offset in range(n):
            p.append({"x": torch.full((2, 2), offset)}, offset=offset)
        p.close(seal=True)


@pytest.mark.parametrize("kind", ["error", "timeout"])
def test_producer_object_write_gives_up_clearly(tmp_path, kind: str) -> None:
    faulty = FaultyStore(LocalStore(str(tmp_path)))
    store = RetryingStore(faulty, POLICY)
    p = tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive")
    faulty.fail_next("put", 4, kind)
    started = time.monotonic()
    with pytest.raises(TransientStorageError) as info:
        p.append({"x": torch.zeros(2, 2)}, offset=0)
    p.abort()
    message = str(info.value)
    assert "gave up after 4 attempts" in message and "data/p0/" in message
    assert faulty.count("put", kind) == 4
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("kind", ["error", "timeout", "lost_ack"])
def test_commit_gives_up_clearly(tmp_path, kind: str) -> None:
    """Every conditional create fails (from the start): the producer cannot start, and says why."""
    faulty, store = _store(str(tmp_path), "put_if_absent", kind)
    with pytest.raises(tgb.TGBError) as info:
        tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive")
    message = str(info.value)
    assert "_tgb/" in message
    assert "gave up after" in message or "no definite reply" in message


def test_lost_acks_on_every_commit_commit_exactly_once(tmp_path) -> None:
    """Each version's acknowledgement is lost (once): the committer recognises its token, no duplicate."""
    from torch_tgb.manifest import Manifest

    faulty = FaultyStore(LocalStore(str(tmp_path)))
    store = RetryingStore(faulty, POLICY)
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        for offset in range(5):
            faulty.fail_next("put_if_absent", 1, "lost_ack")
            p.append({"x": torch.full((2, 2), offset)}, offset=offset)
            p.flush()
    assert faulty.count("put_if_absent", "lost_ack") == 5
    m = Manifest(LocalStore(str(tmp_path)))
    assert [e.offset for e in m.entries(0, m.head().num_steps)] == [0, 1, 2, 3, 4]


def test_consumer_gives_up_clearly(tmp_path) -> None:
    """Every range read fails (metadata and slices: bugs.md B8 was the batched path)."""
    _fill(str(tmp_path))
    faulty, store = _store(str(tmp_path), "get_range", "error")
    ds = tgb.TGBDataset(store, mesh=tgb.Mesh(0, 1), timeout=10)
    with pytest.raises(TransientStorageError) as info:
        list(ds)
    message = str(info.value)
    assert faulty.count("get_range", "error") >= 4  # it did retry
    assert "_tgb/" in message or "data/p0/" in message
    assert "gave up after 4 attempts" in message


def test_consumer_slice_reads_give_up_clearly(tmp_path) -> None:
    """Faults start once the consumer is running: the object range reads give up, naming the object."""
    _fill(str(tmp_path), n=6)
    faulty = FaultyStore(LocalStore(str(tmp_path)))
    store = RetryingStore(faulty, POLICY)
    ds = tgb.TGBDataset(store, mesh=tgb.Mesh(0, 1), timeout=10, prefetch=1)
    it = iter(ds)
    next(it)
    faulty.fail_next("get_range", 10_000, "error")
    with pytest.raises(TransientStorageError) as info:
        list(it)
    assert "gave up after 4 attempts" in str(info.value)
    assert "_tgb/" in str(info.value) or "data/p0/" in str(info.value)


def test_below_the_limit_faults_are_invisible(tmp_path) -> None:
    """Three failures then success on every op: nothing surfaces, data is exact."""
    faulty = FaultyStore(LocalStore(str(tmp_path)))
    store = RetryingStore(faulty, POLICY)
    for op in ("put", "put_if_absent", "get", "get_range", "exists"):
        faulty.fail_next(op, 3, "error")
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        for offset in range(3):
            p.append({"x": torch.full((2, 2), offset)}, offset=offset)
        p.close(seal=True)
    ds = tgb.TGBDataset(store, mesh=tgb.Mesh(0, 1), timeout=10)
    assert [int(b["x"][0, 0]) for b in ds] == [0, 1, 2]
    assert faulty.count(kind="error") == 15
