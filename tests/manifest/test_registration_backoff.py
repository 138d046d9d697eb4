"""The backoff schedule (pure, hypothesis): a random, exponentially growing wait after each conflict.

Registration no longer contends (``test_registration.py``); the schedule
stays for what still retries a lost slot: the benchmarks' model of the
registration in the log it replaced (``benchmarks/dac_scale.py``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.manifest._backoff import Backoff, backoff_delay


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
