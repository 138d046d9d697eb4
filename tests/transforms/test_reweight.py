"""exponentiated_gradient: DoReMi's update (Xie et al. 2023, Algorithm 1), checked against its definition."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import MixtureError
from torch_tgb.transforms import exponentiated_gradient

NAMES = ["a", "b", "c", "d"]
weights_st = st.lists(st.floats(0.01, 10.0), min_size=2, max_size=4).map(lambda ws: dict(zip(NAMES, ws)))
losses_st = st.lists(st.floats(0.0, 20.0), min_size=4, max_size=4).map(lambda ls: dict(zip(NAMES, ls)))


def _doremi(weights, losses, reference, eta, c):
    """Algorithm 1 of DoReMi written out plainly: the reference the implementation is held to."""
    total = sum(weights.values())
    alpha = {n: w / total for n, w in weights.items()}
    lam = {n: max(losses[n] - (reference[n] if reference else 0.0), 0.0) if reference else losses[n] for n in alpha}
    raw = {n: alpha[n] * math.exp(eta * lam[n]) for n in alpha}
    z = sum(raw.values())
    return {n: (1 - c) * raw[n] / z + c / len(alpha) for n in alpha}


@settings(max_examples=200, deadline=None)
@given(weights_st, losses_st, st.booleans(), st.floats(0.0, 2.0), st.floats(0.0, 0.5))
def test_matches_the_algorithm(weights, losses, with_reference, eta, c) -> None:
    reference = {n: losses[n] * 0.5 for n in NAMES} if with_reference else None
    got = exponentiated_gradient(weights, losses, reference=reference, step_size=eta, smoothing=c)
    want = _doremi(weights, losses, reference, eta, c)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert math.fsum(got.values()) == pytest.approx(1.0)
    assert min(got.values()) >= c / len(weights) - 1e-12  # smoothing: no domain starves


@settings(max_examples=200, deadline=None)
@given(weights_st, losses_st, st.floats(0.01, 2.0))
def test_the_domain_that_lags_gains_relative_to_the_others(weights, losses, eta) -> None:
    got = exponentiated_gradient(weights, losses, step_size=eta, smoothing=0.0)
    total = sum(weights.values())
    for x in weights:
        for y in weights:
            if losses[x] > losses[y]:
                assert got[x] / got[y] >= (weights[x] / total) / (weights[y] / total) * (1 - 1e-9)


def test_huge_losses_do_not_overflow() -> None:
    got = exponentiated_gradient({"a": 1, "b": 1}, {"a": 1e6, "b": 0.0}, smoothing=1e-3)
    assert got["a"] == pytest.approx(1 - 5e-4) and got["b"] == pytest.approx(5e-4)


@pytest.mark.parametrize("kwargs", [
    {"weights": {}, "losses": {}},
    {"weights": {"a": 1}, "losses": {}},
    {"weights": {"a": 1}, "losses": {"a": float("inf")}},
    {"weights": {"a": 0}, "losses": {"a": 1}},
    {"weights": {"a": 1}, "losses": {"a": 1}, "smoothing": 2.0},
    {"weights": {"a": 1}, "losses": {"a": 1}, "reference": {}},
])
def test_bad_input_is_a_mixture_error(kwargs) -> None:
    with pytest.raises(MixtureError):
        exponentiated_gradient(**kwargs)
