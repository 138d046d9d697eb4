"""The autoscaling policy (issue 46): bounds, no scale-up while paused by max_lag, hysteresis, mixture-driven.

Pure: no Ray, no clock. Hypothesis draws the signals a fleet's driver can see.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.integrations._autoscale import AutoscalePolicy, FleetSignals
from torch_tgb.integrations._fleet_types import FleetConfig


@st.composite
def policies(draw: st.DrawFn) -> AutoscalePolicy:
    low = draw(st.integers(1, 6))
    high = draw(st.integers(low, 12))
    stall_low = draw(st.floats(0.0, 0.2))
    stall_high = draw(st.floats(stall_low, 0.5))
    lead_low = draw(st.integers(0, 16))
    lead_high = draw(st.integers(lead_low, 128))
    return AutoscalePolicy(low, high, stall_high=stall_high, stall_low=stall_low, lead_low=lead_low,
                           lead_high=lead_high, up_cooldown_s=draw(st.floats(0, 10)),
                           down_cooldown_s=draw(st.floats(0, 60)))


@st.composite
def signals(draw: st.DrawFn, *, paused: bool | None = None) -> FleetSignals:
    return FleetSignals(
        time=draw(st.floats(0, 1e4)), actors=draw(st.integers(0, 16)), shards=draw(st.integers(1, 16)),
        stall=draw(st.none() | st.floats(0, 0.1) | st.floats(0, 1)), rate=draw(st.none() | st.floats(0, 100)),
        lead=draw(st.none() | st.integers(0, 500)),
        paused=draw(st.booleans()) if paused is None else paused,
        batch_s=draw(st.none() | st.floats(0, 5)), cost_ratio=draw(st.floats(0, 4)),
    )


last_changes = st.none() | st.floats(0, 1e4)


@settings(max_examples=300, deadline=None)
@given(policies(), signals(), last_changes)
def test_target_stays_within_bounds_and_moves_by_its_direction(
    policy: AutoscalePolicy, s: FleetSignals, last: float | None
) -> None:
    d = policy.decide(s, last)
    low, high = policy.bounds(s.shards)
    assert low <= d.target <= high, "never outside [min, max] nor above the shards there are"
    assert {"up": d.target > s.actors, "down": d.target < s.actors, "hold": d.target == s.actors}[d.direction]
    assert d.reason


@settings(max_examples=300, deadline=None)
@given(policies(), signals(paused=True), last_changes)
def test_no_scale_up_while_paused_by_max_lag(policy: AutoscalePolicy, s: FleetSignals, last: float | None) -> None:
    low, _ = policy.bounds(s.shards)
    d = policy.decide(s, last)
    if s.actors >= low:  # below the minimum is not scaling for demand: the bounds come first
        assert d.target <= s.actors


@settings(max_examples=300, deadline=None)
@given(policies(), signals(), st.floats(0, 1e4))
def test_cooldown_holds_within_it(policy: AutoscalePolicy, s: FleetSignals, ago: float) -> None:
    """Hysteresis in time: right after a change only the bounds move the target."""
    low, high = policy.bounds(s.shards)
    d = policy.decide(s, s.time - ago)
    if low <= s.actors <= high and d.direction == "up":
        assert ago >= policy.up_cooldown_s
    if low <= s.actors <= high and d.direction == "down":
        assert ago >= policy.down_cooldown_s


@settings(max_examples=300, deadline=None)
@given(policies(), signals())
def test_no_flapping(policy: AutoscalePolicy, s: FleetSignals) -> None:
    """Hysteresis in the signals: after a step in one direction the same signals never step back."""
    d = policy.decide(s, None)
    if d.direction == "hold" or not (policy.bounds(s.shards)[0] <= s.actors <= policy.bounds(s.shards)[1]):
        return
    after = policy.decide(FleetSignals(**{**s.__dict__, "actors": d.target}), None)
    assert after.direction in (d.direction, "hold")


@settings(max_examples=200, deadline=None)
@given(policies(), st.integers(1, 12), st.floats(0.001, 1), st.floats(0.1, 50), st.floats(1.2, 4))
def test_a_costlier_mixture_ahead_scales_up_before_any_stall(
    policy: AutoscalePolicy, actors: int, batch_s: float, rate: float, ratio: float
) -> None:
    """Mixture-driven: a control record ahead that raises a batch's cost grows the pool while the trainer is fed."""
    low, high = policy.bounds(16)
    actors = min(max(actors, low), high)
    s = FleetSignals(time=0.0, actors=actors, shards=16, stall=0.0, rate=rate, lead=policy.lead_high, paused=False,
                     batch_s=batch_s, cost_ratio=ratio, rising=("code",))
    need = policy.need(s)
    assert need == max(1, math.ceil(batch_s * ratio * rate * policy.headroom - 1e-9))
    d = policy.decide(s, None)
    if need > actors and actors < high:
        assert d.direction == "up" and d.target == min(high, need)
        assert ("code" in d.reason) == (ratio > 1 + policy.ratio_tolerance)  # the decision names the rising source
    else:
        assert d.direction != "up"


def test_the_rules_by_example() -> None:
    p = AutoscalePolicy(1, 4, up_cooldown_s=5, down_cooldown_s=30)
    base = dict(time=100.0, shards=8, rate=10.0, batch_s=0.1)
    starving = FleetSignals(actors=1, stall=0.3, lead=2, **base)
    up = p.decide(starving, None)
    assert up.direction == "up" and up.target == 2 and "waits 30%" in up.reason  # need: 0.1 * 10/0.7 * 1.2 -> 2
    assert p.decide(starving, 98.0).direction == "hold"  # 2 s after the last change: cooling down
    assert p.decide(FleetSignals(actors=2, stall=0.03, lead=20, **base), None).direction == "hold"  # between
    down = p.decide(FleetSignals(actors=4, stall=0.0, lead=100, **base), None)
    assert (down.direction, down.target) == ("down", 3)
    assert p.decide(FleetSignals(actors=4, stall=0.0, lead=100, **base), 80.0).direction == "hold"  # 20 s < 30 s
    behind = p.decide(FleetSignals(actors=2, stall=0.0, lead=20, **{**base, "batch_s": 0.5}), None)
    assert (behind.direction, behind.target) == ("up", 4) and "needs 6 actors" in behind.reason  # before a stall
    assert p.decide(FleetSignals(actors=4, stall=0.0, lead=20, **{**base, "batch_s": 0.3}),
                    None).direction == "hold"  # need met: ceil(0.3 * 10 * 1.2) = 4
    paused = p.decide(FleetSignals(actors=2, stall=0.3, lead=2, paused=True, **base), None)
    assert paused.direction == "hold" and "max_lag" in paused.reason
    assert p.decide(FleetSignals(actors=0, **base), None).target == 1
    assert p.decide(FleetSignals(actors=9, **base), None).target == 4
    assert p.decide(FleetSignals(actors=3, stall=0.5, lead=0, **{**base, "shards": 3}), None).direction == "hold"


@pytest.mark.parametrize("bad", [(0, 2), (3, 2), (1, 2, 0.01, 0.05)])
def test_bad_policies_are_refused(bad: tuple) -> None:
    low, high, *stalls = bad
    with pytest.raises(ValueError):
        AutoscalePolicy(low, high, *stalls)


def test_fleet_config_builds_the_policy() -> None:
    assert FleetConfig().policy is None
    assert FleetConfig(autoscale=(2, 6)).policy == AutoscalePolicy(2, 6)
    custom = AutoscalePolicy(1, 3, stall_high=0.1)
    assert FleetConfig(autoscale=custom).policy is custom
    for bad in [(0, 3), (4, 2), (1,), "2-6"]:
        with pytest.raises(ValueError, match="autoscale"):
            FleetConfig(autoscale=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="autoscale_interval_s"):
        FleetConfig(autoscale=(1, 2), autoscale_interval_s=0)
