"""Commit policies: parsing and the baselines' rules."""

from __future__ import annotations

import pytest

from torch_tgb.producer import (
    AIMDPolicy,
    CommitPolicy,
    DACPolicy,
    FixedPolicy,
    IncrPolicy,
    NaivePolicy,
    make_policy,
)


@pytest.mark.parametrize(
    "spec, cls, name",
    [
        ("naive", NaivePolicy, "naive"),
        ("fixed:10", FixedPolicy, "fixed10"),
        ("fixed100", FixedPolicy, "fixed100"),
        ("fixed", FixedPolicy, "fixed10"),
        ("incr", IncrPolicy, "incr"),
        ("AIMD", AIMDPolicy, "aimd"),
        ("dac", DACPolicy, "dac"),
    ],
)
def test_make_policy(spec: str, cls: type, name: str) -> None:
    policy = make_policy(spec)
    assert isinstance(policy, cls) and policy.name == name


def test_make_policy_errors_and_passthrough() -> None:
    for bad in ("nope", "fixed:x", "fixed:0", "dac:3"):
        with pytest.raises(ValueError):
            make_policy(bad)
    with pytest.raises(TypeError):
        make_policy(3)  # type: ignore[arg-type]
    custom = FixedPolicy(3)
    assert make_policy(custom) is custom
    assert isinstance(custom, CommitPolicy)


def test_naive_commits_each_entry_alone() -> None:
    policy = NaivePolicy()
    assert policy.max_entries == 1
    assert policy.wait_time(0, 0.0) is None and policy.wait_time(1, 0.0) == 0.0


def test_fixed_waits_for_k_entries() -> None:
    policy = FixedPolicy(10)
    assert policy.wait_time(9, 100.0) is None
    assert policy.wait_time(10, 0.0) == 0.0
    policy.on_attempt(success=False, window_s=0.1, active_producers=4)
    assert policy.wait_time(10, 0.0) == 0.0  # fixed does not adapt


def test_incr_grows_by_one_per_conflict() -> None:
    policy = IncrPolicy()
    assert policy.wait_time(10, 0.0) == 0.0
    policy.on_attempt(success=False, window_s=0.1, active_producers=4)
    policy.on_attempt(success=True, window_s=0.1, active_producers=4)
    policy.on_attempt(success=False, window_s=0.1, active_producers=4)
    assert policy.wait_time(11, 0.0) is None and policy.wait_time(12, 0.0) == 0.0


def test_aimd_adds_rate_on_success_halves_on_conflict() -> None:
    policy = AIMDPolicy(increase=0.5, initial_rate=1.0)
    assert policy.gap_s == pytest.approx(1.0)
    for _ in range(2):
        policy.on_attempt(success=True, window_s=0.01, active_producers=2)
    assert policy.rate == pytest.approx(2.0) and policy.gap_s == pytest.approx(0.5)
    policy.on_attempt(success=False, window_s=0.01, active_producers=2)
    assert policy.rate == pytest.approx(1.0)
    assert policy.wait_time(1, 0.25) == pytest.approx(0.75)
    assert policy.wait_time(0, 0.05) is None
    for _ in range(20):
        policy.on_attempt(success=False, window_s=0.01, active_producers=2)
    assert policy.rate == pytest.approx(policy.min_rate)
    with pytest.raises(ValueError):
        AIMDPolicy(increase=0)
