"""DAC math: closed forms meet their budgets; the gap grows with W and N; a Poisson simulation agrees."""

from __future__ import annotations

import heapq
import math
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from torch_tgb.producer import DACConfig, DACPolicy
from torch_tgb.producer.dac import (
    commit_duty,
    conflict_gap,
    conflict_probability,
    duty_gap,
    ema,
    jittered,
    optimal_gap,
)

windows = st.floats(1e-4, 10.0)
producers = st.integers(1, 512)
budgets = st.floats(0.005, 0.5)


@given(windows, st.integers(2, 512), budgets)
@settings(max_examples=200, deadline=None)
def test_conflict_gap_meets_budget_exactly(w: float, n: int, eps: float) -> None:
    g = conflict_gap(w, n, eps)
    assume(g > 0)
    assert conflict_probability(w, g, n) == pytest.approx(eps, rel=1e-9)
    assert conflict_probability(w, g * 1.01, n) < eps  # a longer gap is safer


@given(windows, budgets)
@settings(max_examples=200, deadline=None)
def test_duty_gap_meets_budget_exactly(w: float, eps: float) -> None:
    assert commit_duty(w, duty_gap(w, eps)) == pytest.approx(eps, rel=1e-9)


@given(windows, producers, budgets, budgets)
@settings(max_examples=200, deadline=None)
def test_optimal_gap_meets_both_budgets(w: float, n: int, eps_c: float, eps_d: float) -> None:
    g = optimal_gap(w, n, epsilon_c=eps_c, epsilon_d=eps_d)
    assert g >= 0
    assert conflict_probability(w, g, n) <= eps_c * (1 + 1e-9)
    assert commit_duty(w, g) <= eps_d * (1 + 1e-9)
    # and it is the smallest such gap: 1 % less breaks one budget
    if g > 0:
        smaller = g * 0.99
        assert conflict_probability(w, smaller, n) > eps_c or commit_duty(w, smaller) > eps_d


@given(windows, windows, producers, producers)
@settings(max_examples=200, deadline=None)
def test_gap_grows_with_window_and_producers(w1: float, w2: float, n1: int, n2: int) -> None:
    (wa, wb), (na, nb) = sorted((w1, w2)), sorted((n1, n2))
    assert optimal_gap(wa, na) <= optimal_gap(wb, na) + 1e-12
    assert optimal_gap(wa, na) <= optimal_gap(wa, nb) + 1e-12


def test_known_values() -> None:
    # 32 producers, W = 50 ms: conflict budget binds
    w, n = 0.05, 32
    g_c = 31 * w / -math.log(0.95) - w
    assert optimal_gap(w, n) == pytest.approx(g_c)
    assert g_c == pytest.approx(30.17, abs=0.01)
    # a single producer: only the duty budget (D = 10 % -> g = 9 W)
    assert optimal_gap(w, 1) == pytest.approx(9 * w)
    assert conflict_probability(w, 0.0, 1) == 0.0


def test_jitter_and_ema() -> None:
    assert jittered(10.0, 0.2, 0.2) == pytest.approx(12.0)
    assert jittered(10.0, 0.2, -0.2) == pytest.approx(8.0)
    with pytest.raises(ValueError):
        jittered(1.0, 0.2, 0.3)
    assert ema(None, 5.0, 0.2) == 5.0
    assert ema(5.0, 10.0, 0.2) == pytest.approx(6.0)
    with pytest.raises(ValueError):
        ema(1.0, 1.0, 0.0)
    with pytest.raises(ValueError):
        optimal_gap(0.1, 2, epsilon_c=1.0)
    with pytest.raises(ValueError):
        optimal_gap(float("nan"), 2)


def simulate(n: int, window: float, *, seconds: float, seed: int = 0, config: DACConfig | None = None):
    """N producers running DACPolicy against a shared log; returns (conflict rate, duty, attempts).

    An attempt reads the newest version at ``start`` and writes at ``start + W``;
    it conflicts if another producer's successful write lands inside that
    window. The window itself is exponentially distributed around ``window``
    (request times vary), so producers do not lock into a pattern.
    """
    rng = random.Random(seed)
    policies = [DACPolicy(config, seed=seed * 1000 + i) for i in range(n)]
    # the first attempts start at random phases
    events = [(rng.uniform(0, 1.0), i) for i in range(n)]
    heapq.heapify(events)
    last_success = -1.0
    attempts = conflicts = 0
    busy = [0.0] * n
    in_flight: dict[int, float] = {}
    while events:
        t, i = heapq.heappop(events)
        if t > seconds:
            break
        if i not in in_flight:  # attempt starts: read the newest version
            w = rng.expovariate(1 / window)
            in_flight[i] = t
            heapq.heappush(events, (t + w, i))
            continue
        start = in_flight.pop(i)
        attempts += 1
        success = last_success <= start  # nobody committed since we read
        if success:
            last_success = t
        else:
            conflicts += 1
        busy[i] += t - start
        policies[i].on_attempt(success=success, window_s=t - start, active_producers=n)
        heapq.heappush(events, (t + policies[i].gap_s, i))
    duty = sum(busy) / (n * seconds)
    return conflicts / attempts, duty, attempts


@pytest.mark.parametrize("n, window", [(4, 0.02), (16, 0.04), (32, 0.05)])
def test_budgets_met_in_poisson_simulation(n: int, window: float) -> None:
    config = DACConfig()
    rate, duty, attempts = simulate(n, window, seconds=2000 * window * n, seed=n)
    assert attempts > 500
    # the Poisson model is an approximation; allow a little slack on the conflict budget
    assert rate <= config.epsilon_c * 1.6, rate
    assert duty <= config.epsilon_d * 1.1, duty


def test_simulation_without_gap_conflicts_a_lot() -> None:
    """The same simulation with a zero gap (Naive-like) is far over budget: the check has teeth."""
    config = DACConfig(epsilon_c=0.99, epsilon_d=0.99, jitter=0.0)
    rate, _, _ = simulate(16, 0.04, seconds=20, config=config)
    assert rate > 0.5


def test_policy_tracks_window_and_producers() -> None:
    policy = DACPolicy(DACConfig(jitter=0.0))
    assert policy.wait_time(0, 0.0) is None
    assert policy.wait_time(3, 0.0) == 0.0
    policy.on_attempt(success=True, window_s=0.1, active_producers=1)
    assert policy.gap_s == pytest.approx(0.9)  # duty budget 10 %
    policy.on_attempt(success=True, window_s=0.1, active_producers=8)
    assert policy.gap_s == pytest.approx(optimal_gap(0.1, 8))
    assert policy.wait_time(1, 0.5) == pytest.approx(policy.gap_s - 0.5)
    assert policy.active_horizon_s >= 4 * (0.1 + policy.gap_s)
