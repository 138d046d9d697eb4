"""Mixture schedules and the deterministic draw of a source."""

from __future__ import annotations

import pickle
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import MixtureError
from torch_tgb.transforms import as_schedule, check_weights, constant, draw_source, linear, parse_weights, piecewise
from torch_tgb.transforms.mixing import uniform


def test_schedules() -> None:
    assert constant({"a": 1, "b": 3})(123) == {"a": 1.0, "b": 3.0}
    p = piecewise([10, 20], [{"a": 1}, {"b": 1}, {"a": 1, "b": 1}])
    assert [p(0), p(9), p(10), p(19), p(20), p(10**9)] == [{"a": 1}, {"a": 1}, {"b": 1}, {"b": 1}, {"a": 1, "b": 1}] + [
        {"a": 1, "b": 1}
    ]
    lin = linear({"a": 1.0}, {"a": 0.0, "b": 1.0}, 100)
    assert lin(0) == {"a": 1.0, "b": 0.0} and lin(50) == {"a": 0.5, "b": 0.5} and lin(100) == lin(10**6)
    assert as_schedule({"a": 1})(5) == {"a": 1.0}
    fn = lambda step: {"a": step + 1}  # any callable is a schedule
    assert as_schedule(fn) is fn
    assert pickle.loads(pickle.dumps(lin)) == lin


def test_validation() -> None:
    with pytest.raises(MixtureError, match="all zero"):
        constant({"a": 0, "b": 0})
    with pytest.raises(MixtureError, match="'a'.*>= 0"):
        constant({"a": -1})
    with pytest.raises(MixtureError, match="finite"):
        check_weights({"a": float("nan")})
    with pytest.raises(MixtureError, match=r"step=7 name unknown sources \['c'\]"):
        check_weights({"a": 1, "c": 1}, ["a", "b"], step=7)
    assert check_weights({"a": 1}, ["a", "b"]) == {"a": 1.0, "b": 0.0}
    with pytest.raises(MixtureError, match="len\\(weights\\)"):
        piecewise([5], [{"a": 1}])
    with pytest.raises(MixtureError, match="increasing"):
        piecewise([5, 5], [{"a": 1}] * 3)
    with pytest.raises(MixtureError, match="steps >= 1"):
        linear({"a": 1}, {"a": 2}, 0)
    with pytest.raises(MixtureError):
        as_schedule(3)  # type: ignore[arg-type]
    assert parse_weights("web=0.7, code=0.3") == {"web": 0.7, "code": 0.3}
    for bad in ("web", "web=x", "=1", "a=0"):
        with pytest.raises(MixtureError):
            parse_weights(bad)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), step=st.integers(0, 2**40), draw=st.integers(0, 2**40))
def test_draw_is_pure_and_ignores_insertion_order(seed: int, step: int, draw: int) -> None:
    u = uniform(seed, step, draw)
    assert 0.0 <= u < 1.0 and uniform(seed, step, draw) == u
    w = {"x": 1.0, "y": 2.0, "z": 0.0}
    name = draw_source(w, seed, step, draw)
    assert name in ("x", "y")  # zero weight never drawn
    assert draw_source(dict(reversed(list(w.items()))), seed, step, draw) == name


def test_draw_frequencies_follow_the_weights() -> None:
    w = {"a": 0.5, "b": 0.3, "c": 0.2}
    counts = Counter(draw_source(w, 7, k // 4, k) for k in range(40_000))
    for name, weight in w.items():
        assert abs(counts[name] / 40_000 - weight) < 0.01
    assert Counter(draw_source(w, 8, 0, k) for k in range(1000)) != Counter(
        draw_source(w, 7, 0, k) for k in range(1000)
    )
