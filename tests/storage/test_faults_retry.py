"""FaultyStore, RetryingStore and the retry policy, including lost acknowledgements."""

from __future__ import annotations

import uuid

import pytest

from torch_tgb.errors import (
    AmbiguousWriteError,
    ObjectNotFound,
    StorageError,
    StorageFull,
    TransientStorageError,
)
from torch_tgb.storage import (
    FaultPlan,
    FaultRates,
    FaultyStore,
    LatencyStore,
    MemoryStore,
    RangeFailure,
    RangeRequest,
    RetryingStore,
    RetryPolicy,
)


@pytest.fixture
def memory():
    store = MemoryStore(f"faults-{uuid.uuid4().hex}")
    yield store
    store.destroy()


class Sleeps(list):
    """A fake ``sleep`` that records the requested delays."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def retrying(inner, attempts=5, sleeps=None):
    return RetryingStore(inner, RetryPolicy(attempts=attempts, base_delay=0.1, max_delay=0.3), sleep=sleeps, seed=1)


# --- RetryPolicy -------------------------------------------------------------------


def test_retry_policy_delays_are_capped_exponential_with_jitter():
    import random

    exact = RetryPolicy(attempts=6, base_delay=0.1, max_delay=0.5, jitter=0.0)
    rng = random.Random(0)
    assert [exact.delay(n, rng) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    full = RetryPolicy(base_delay=0.1, max_delay=0.5, jitter=1.0)
    delays = [full.delay(3, rng) for _ in range(200)]
    assert all(0.0 <= d <= 0.4 for d in delays)
    assert max(delays) - min(delays) > 0.1  # jitter spreads the retries


@pytest.mark.parametrize("kwargs", [{"attempts": 0}, {"base_delay": -1}, {"jitter": 1.5}])
def test_retry_policy_validates(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


# --- retries --------------------------------------------------------------------------


def test_transient_errors_are_retried_with_backoff(memory):
    memory.put("k", b"value")
    faulty = FaultyStore(memory)
    faulty.fail_next("get", 3, "error")
    sleeps = Sleeps()
    store = retrying(faulty, attempts=5, sleeps=sleeps)
    assert store.get("k") == b"value"
    assert faulty.count("get", "error") == 3
    assert len(sleeps) == 3 and store.retries == 3
    assert all(0 <= s <= 0.3 for s in sleeps)


def test_retries_exhausted_raise_transient_naming_key(memory):
    faulty = FaultyStore(memory)
    faulty.fail_next("get_range", 10, "timeout")
    sleeps = Sleeps()
    with pytest.raises(TransientStorageError) as info:
        retrying(faulty, attempts=3, sleeps=sleeps).get_range("some/key", 0, 4)
    assert "some/key" in str(info.value) and memory.url in str(info.value)
    assert "3 attempts" in str(info.value)
    assert len(sleeps) == 2 and faulty.count("get_range") == 3


def test_permanent_errors_are_not_retried(memory):
    sleeps = Sleeps()
    faulty = FaultyStore(memory)
    store = retrying(faulty, sleeps=sleeps)
    with pytest.raises(ObjectNotFound, match="missing"):
        store.get("missing")
    faulty.fail_next("put", 1, "enospc")
    with pytest.raises(StorageFull, match="full"):
        store.put("big", b"x" * 100)
    assert not memory.exists("big")  # nothing was written
    assert sleeps == []


def test_enospc_fault_on_put_if_absent_is_storage_full(memory):
    faulty = FaultyStore(memory)
    faulty.fail_next("put_if_absent", 1, "enospc")
    with pytest.raises(StorageFull):
        faulty.put_if_absent("k", b"v")
    assert faulty.put_if_absent("k", b"v") is True


# --- lost acknowledgements ---------------------------------------------------------


def test_lost_ack_write_landed_but_caller_sees_ambiguous(memory):
    faulty = FaultyStore(memory)
    faulty.fail_next("put_if_absent", 1, "lost_ack")
    with pytest.raises(AmbiguousWriteError, match="k1"):
        faulty.put_if_absent("k1", b"mine")
    assert memory.get("k1") == b"mine"  # it landed
    assert faulty.count("put_if_absent", "lost_ack") == 1


def test_timeout_before_write_did_not_land(memory):
    faulty = FaultyStore(memory)
    faulty.fail_next("put_if_absent", 1, "timeout")
    with pytest.raises(AmbiguousWriteError):
        faulty.put_if_absent("k1", b"mine")
    assert not memory.exists("k1")


def test_retrying_put_if_absent_resolves_lost_ack_by_reading_back(memory):
    faulty = FaultyStore(memory)
    faulty.fail_next("put_if_absent", 1, "lost_ack")
    store = retrying(faulty, sleeps=Sleeps())
    # The retry finds the key taken -- by our own first attempt -- and reads it back.
    assert store.put_if_absent("k", b"mine") is True
    assert memory.get("k") == b"mine"


def test_retrying_put_if_absent_after_timeout_when_someone_else_won(memory):
    faulty = FaultyStore(memory)
    faulty.fail_next("put_if_absent", 1, "timeout")  # ours did not land

    def rival_writes_during_backoff(seconds: float) -> None:
        memory.put_if_absent("k", b"rival")

    store = RetryingStore(faulty, RetryPolicy(attempts=3), sleep=rival_writes_during_backoff)
    assert store.put_if_absent("k", b"mine") is False
    assert memory.get("k") == b"rival"


def test_plain_loser_is_not_read_back(memory):
    memory.put("k", b"mine")  # same bytes, but no ambiguity: False is the true answer
    assert retrying(FaultyStore(memory), sleeps=Sleeps()).put_if_absent("k", b"mine") is False


def test_put_lost_ack_is_retried_idempotently(memory):
    faulty = FaultyStore(memory)
    faulty.fail_next("put", 2, "lost_ack")
    store = retrying(faulty, sleeps=Sleeps())
    store.put("k", b"v")
    assert memory.get("k") == b"v" and faulty.count("put") == 2


def test_ambiguous_error_escapes_after_attempts(memory):
    faulty = FaultyStore(memory)
    faulty.fail_next("put_if_absent", 5, "lost_ack")
    with pytest.raises(AmbiguousWriteError):
        retrying(faulty, attempts=2, sleeps=Sleeps()).put_if_absent("k", b"v")


# --- random plans ----------------------------------------------------------------------


def _fates(seed, n=300):
    store = FaultyStore(MemoryStore(f"fates-{uuid.uuid4().hex}"), FaultPlan(seed=seed, default=FaultRates(error=0.3)))
    out = []
    for _ in range(n):
        try:
            store.exists("k")
            out.append(False)
        except TransientStorageError:
            out.append(True)
    return out, store


def test_faults_are_deterministic_by_seed_and_follow_rates():
    a, store = _fates(7)
    b, _ = _fates(7)
    c, _ = _fates(8)
    assert a == b and a != c
    assert 45 <= sum(a) <= 135  # 30 % of 300, loosely
    assert store.count("exists", "error") == sum(a)


def test_per_op_rates_and_lost_ack_only_for_writes(memory):
    plan = FaultPlan(seed=3, ops={"put": FaultRates(lost_ack=1.0)}, default=FaultRates(lost_ack=1.0))
    store = FaultyStore(memory, plan)
    memory.put("x", b"abc")
    assert store.get_range("x", 0, 2) == b"ab"  # a read has no acknowledgement to lose
    with pytest.raises(AmbiguousWriteError):
        store.put("y", b"1")
    assert memory.get("y") == b"1"
    assert store.count(kind="lost_ack") == 1 and store.count("get_range") == 0


def test_get_ranges_with_faults_retried_and_placeholders(memory):
    memory.put("obj", bytes(range(256)) * 64)
    plan = FaultPlan(seed=11, ops={"get_range": FaultRates(error=0.3)})
    requests = [RangeRequest("obj", i * 10, i * 10 + 50) for i in range(100)]
    expected = [(bytes(range(256)) * 64)[r.start : r.end] for r in requests]

    faulty = FaultyStore(memory, plan)
    raw = faulty.get_ranges(requests, continue_on_error=True)
    failed = [i for i, r in enumerate(raw) if isinstance(r, RangeFailure)]
    assert failed and len(failed) == faulty.count("get_range", "error")
    assert all(isinstance(raw[i].error, TransientStorageError) and raw[i].request == requests[i] for i in failed)
    assert all(raw[i] == expected[i] for i in range(100) if i not in failed)
    with pytest.raises(TransientStorageError):
        FaultyStore(memory, plan).get_ranges(requests)

    faulty = FaultyStore(memory, plan)
    assert retrying(faulty, attempts=10, sleeps=Sleeps()).get_ranges(requests) == expected
    assert faulty.count("get_range", "error") > 0


def test_slow_fault_still_answers(memory):
    memory.put("k", b"v")
    store = FaultyStore(memory, FaultPlan(ops={"get": FaultRates(slow=1.0, delay=0.001)}))
    assert store.get("k") == b"v"
    assert store.count("get", "slow") == 1


def test_fault_plan_validation(memory):
    with pytest.raises(ValueError, match="unknown operations"):
        FaultPlan(ops={"gett": FaultRates()})
    with pytest.raises(ValueError):
        FaultRates(error=2.0)
    store = FaultyStore(memory)
    with pytest.raises(ValueError, match="lost_ack"):
        store.fail_next("get", 1, "lost_ack")
    with pytest.raises(ValueError, match="enospc"):
        store.fail_next("delete", 1, "enospc")
    with pytest.raises(ValueError):
        store.fail_next("get", 1, "meteor")


def test_wrappers_hide_local_path(tmp_path):
    from torch_tgb.storage import LocalStore

    local = LocalStore(tmp_path)
    assert local.local_path("a") is not None
    assert FaultyStore(local).local_path("a") is None
    assert LatencyStore(local).local_path("a") is None
    assert RetryingStore(local).local_path("a") == local.local_path("a")


# --- LatencyStore ---------------------------------------------------------------------------


def test_latency_store_charges_rtt_plus_transfer(memory):
    memory.put("k", b"x" * 1000)
    sleeps = Sleeps()
    store = LatencyStore(memory, rtt=0.01, bandwidth=100_000, sleep=sleeps)
    assert store.get_range("k", 0, 500) == b"x" * 500
    store.exists("k")
    store.put("j", b"y" * 2000)
    assert sleeps == pytest.approx([0.015, 0.01, 0.03])
    assert "model" in store.describe() and "10 ms" in store.describe()
    with pytest.raises(ValueError):
        LatencyStore(memory, rtt=-1)


def test_storage_error_classes():
    assert issubclass(AmbiguousWriteError, TransientStorageError)
    assert not issubclass(StorageFull, TransientStorageError)
    assert issubclass(StorageError, OSError)
