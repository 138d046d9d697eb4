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
    first_gap,
    gap_cap,
    jittered,
    next_gap,
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
    assert 0.0 <= policy.gap_s <= 0.9  # the first gap: a random phase of the cycle
    policy.on_attempt(success=True, window_s=0.1, active_producers=1)
    assert policy.gap_s == pytest.approx(0.9)  # duty budget 10 %
    policy.on_attempt(success=True, window_s=0.1, active_producers=8)
    assert policy.gap_s == pytest.approx(optimal_gap(0.1, 8))
    assert policy.wait_time(1, 0.5) == pytest.approx(policy.gap_s - 0.5)
    assert policy.active_horizon_s >= 4 * (0.1 + policy.gap_s)


# --- the cap, the jitter after it, the first gap (issue 42) ---------------------------------------


@given(st.floats(0.1, 100.0), st.integers(1, 100_000), st.integers(2, 256))
@settings(max_examples=200, deadline=None)
def test_gap_cap_is_max_gap_up_to_the_reference_then_grows_as_n_minus_1(max_gap: float, n: int, ref: int) -> None:
    cap = gap_cap(max_gap, n, reference_producers=ref)
    assert cap == (max_gap if n <= ref else pytest.approx(max_gap * (n - 1) / (ref - 1)))
    assert gap_cap(max_gap, n + 1, reference_producers=ref) >= cap


@given(st.floats(1e-3, 0.2), st.integers(2, 100_000))
@settings(max_examples=200, deadline=None)
def test_conflicts_at_the_cap_do_not_grow_with_n(w: float, n: int) -> None:
    """At the cap P < 1 - exp(-W (ref-1) / max_gap) at every N; a fixed 30 s cap reaches 1 - exp(-(N-1) W / 30)."""
    c = DACConfig()
    bound = 1.0 - math.exp(-w * (c.cap_producers - 1) / c.max_gap_s)
    assert conflict_probability(w, gap_cap(c.max_gap_s, n, reference_producers=c.cap_producers), n) <= bound
    if n >= 1024 and w >= 0.04:  # what the fixed cap did
        assert conflict_probability(w, c.max_gap_s, n) > 0.7


@given(st.floats(0.0, 1e4), st.floats(1e-3, 1e3), st.floats(0.0, 0.9), st.floats(-1.0, 1.0), st.floats(1.0, 1e4))
@settings(max_examples=300, deadline=None)
def test_next_gap_jitters_after_the_caps_and_never_passes_the_ceiling(
    target: float, cap: float, j: float, share: float, ceiling: float
) -> None:
    u = share * j
    gap = next_gap(target, cap, j, u, ceiling=ceiling)
    assert gap == pytest.approx(min(target, cap, ceiling / (1 + j)) * (1 + u))
    assert gap <= ceiling * (1 + 1e-12)


@given(st.floats(0.0, 1e4), st.floats(0.0, 1.0))
def test_first_gap_is_a_share_of_the_gap(gap: float, phase: float) -> None:
    assert 0.0 <= first_gap(gap, phase) <= gap
    assert first_gap(gap, phase) == pytest.approx(gap * phase)
    with pytest.raises(ValueError):
        first_gap(gap, 1.5)


def test_gaps_at_the_cap_still_differ() -> None:
    """64 producers, W = 40 ms: DAC asks for ~49 s, above the 30 s of the old fixed cap; the gaps spread ±10 %.

    Before issue 42 the cap came after the jitter: every gap was exactly 30 s,
    and producers started together stayed in phase.
    """
    policy = DACPolicy(seed=1)
    gaps = []
    for _ in range(200):
        policy.on_attempt(success=True, window_s=0.04, active_producers=64)
        gaps.append(policy.gap_s)
    gaps = gaps[1:]  # the first gap is a random phase
    spread = DACConfig().jitter * optimal_gap(0.04, 64)
    assert max(gaps) - min(gaps) > 1.5 * spread  # uniform over ±spread around the target
    assert len(set(gaps)) == len(gaps)


def test_first_gaps_spread_over_the_cycle() -> None:
    """Producers started together make their first attempt together; their next ones spread over the whole cycle."""
    firsts = []
    for seed in range(400):
        policy = DACPolicy(seed=seed)
        policy.on_attempt(success=False, window_s=0.04, active_producers=16)
        firsts.append(policy.gap_s)
    g = optimal_gap(0.04, 16) * (1 + DACConfig().jitter)
    assert min(firsts) < 0.05 * g and max(firsts) > 0.85 * g
    assert sum(firsts) / len(firsts) == pytest.approx(g / 2, rel=0.15)


def test_the_ceiling_bounds_the_gap_at_any_n() -> None:
    """1,024 producers want ~800 s gaps; the commit loop commits after max_commit_delay_s anyway: gaps stay below it."""
    from torch_tgb.producer import ProducerConfig

    policy = DACPolicy(seed=2)
    for _ in range(50):
        policy.on_attempt(success=True, window_s=0.04, active_producers=1024)
        assert policy.gap_s <= ProducerConfig().max_commit_delay_s
    assert policy.gap_s >= ProducerConfig().max_commit_delay_s * (1 - DACConfig().jitter) / (1 + DACConfig().jitter)
