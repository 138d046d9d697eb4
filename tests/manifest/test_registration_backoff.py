"""Registration with backoff: the delay schedule (pure, hypothesis) and what ``Committer.start`` does with it.

Producers started together all write the same slot; retried at once, N of
them cost O(N²) attempts (issue 42: 1,024 producers, 1.94M requests). With
a random, exponentially growing wait after each conflict they cost a few
attempts each: counted here, never timed.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

import pytest
from _manifest_helpers import HookStore
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.manifest import Committer, Manifest, version_key
from torch_tgb.manifest._backoff import Backoff, backoff_delay
from torch_tgb.storage import LatencyStore, MemoryStore
from torch_tgb.testing.counting import CountingStore


@given(st.integers(0, 200), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 60.0))
@settings(max_examples=300, deadline=None)
def test_delay_is_a_uniform_share_of_a_doubling_window(k: int, u: float, base: float, extra: float) -> None:
    cap = base + extra
    delay = backoff_delay(k, u, base_s=base, cap_s=cap)
    window = 0.0 if k == 0 else min(cap, base * 2.0 ** min(k - 1, 64))
    assert delay == pytest.approx(u * window)
    assert 0.0 <= delay <= cap
    # the window never shrinks with more conflicts, and u = 1 reaches it
    assert backoff_delay(k + 1, 1.0, base_s=base, cap_s=cap) >= backoff_delay(k, 1.0, base_s=base, cap_s=cap)


def test_delay_schedule_values_and_refusals() -> None:
    b = Backoff(base_s=0.05, cap_s=1.0)
    assert [b.delay(k, 1.0) for k in range(7)] == pytest.approx([0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0])
    assert b.delay(10_000, 0.5) == pytest.approx(0.5)  # no overflow far past the cap
    assert Backoff(0.0, 0.0).delay(5, 0.7) == 0.0  # retry at once
    for bad in (dict(conflicts=-1, u=0.5), dict(conflicts=1, u=1.5)):
        with pytest.raises(ValueError):
            backoff_delay(bad["conflicts"], bad["u"], base_s=0.05, cap_s=1.0)
    with pytest.raises(ValueError):
        Backoff(base_s=2.0, cap_s=1.0)
    with pytest.raises(ValueError):
        Backoff(base_s=0.0, cap_s=float("inf"))


@dataclass(frozen=True)
class RecordingBackoff(Backoff):
    """Records the waits asked for instead of sleeping."""

    waits: list[int] = field(default_factory=list)

    def wait(self, conflicts: int) -> None:
        self.waits.append(conflicts)


def test_start_backs_off_after_a_conflict_then_takes_the_next_slot() -> None:
    """B takes version 1 between A's read of the empty slot and A's create: A waits once, then bumps in version 2."""
    inner = MemoryStore(f"backoff-{uuid.uuid4().hex}")
    b = Committer(Manifest(inner), "b")
    store = HookStore(inner, "get", lambda key: key == version_key(1), b.start)
    a = Committer(Manifest(store), "a")
    a.registration_backoff = RecordingBackoff()
    try:
        a.start()
        assert a.registration_backoff.waits == [1]
        assert (a.epoch, a.view.version, b.epoch) == (1, 2, 1)
        assert store.calls["put_if_absent"] == 2  # the lost slot, then the next
    finally:
        inner.destroy()


def _register_together(n: int, *, backoff: Backoff) -> CountingStore:
    """``n`` committers start at once on a counting store over a 5 ms latency model."""
    inner = MemoryStore(f"register-{uuid.uuid4().hex}")
    store = CountingStore(LatencyStore(inner, rtt=0.005, bandwidth=0))
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            committer = Committer(Manifest(store), f"p{i:03d}")
            committer.registration_backoff = backoff
            barrier.wait()
            committer.start()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    inner.destroy()
    if errors:
        raise errors[0]
    return store


def test_registration_of_32_producers_costs_a_few_attempts_each() -> None:
    """32 producers started together: O(N) bump attempts (at once, ~N²/2 = 512; with backoff ~4 each), and
    O(1) requests per attempt (format 2: a refresh reads the hint, probes, the newest version and one bucket,
    never the versions in between; an attempt writes a bucket and the version)."""
    n = 32
    store = _register_together(n, backoff=Backoff())
    attempts = store.calls["put_if_absent"]
    log_reads = sum(count for key, count in store.range_keys.items() if key.startswith("_tgb/log/"))
    assert n <= attempts <= 6 * n, attempts
    assert log_reads <= 3 * attempts + n, log_reads
    # everything: a cold head() (~6 requests) per producer, then ~10 per attempt
    assert store.total <= 10 * attempts + 8 * n, (store.total, attempts)
