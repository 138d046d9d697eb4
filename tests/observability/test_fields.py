from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from torch_tgb.observability import StatsSource, as_source, stats_fields


@dataclass(frozen=True)
class _Latency:
    p50: float = 0.5
    p99: float = 2.0


@dataclass(frozen=True)
class _Stats:
    commit_attempts: int = 3
    paused_for_lag: bool = True
    window_s: float = 0.25
    note: str = "ignored"
    missing: float | None = None
    latency: _Latency = field(default_factory=_Latency)


class Producer:
    """Named like the real one so that the role is guessed."""

    def __init__(self) -> None:
        self.producer_id = "p7"
        self.url = "s3://user:pw@bucket/run"

    def stats(self) -> _Stats:
        return _Stats()


def test_fields_flatten_numbers_bools_and_nested():
    assert stats_fields(_Stats()) == {
        "commit_attempts": 3.0,
        "paused_for_lag": 1.0,
        "window_s": 0.25,
        "latency_p50": 0.5,
        "latency_p99": 2.0,
    }


def test_fields_accept_mappings_and_reject_others():
    assert stats_fields({"a": 1, "b": {"c": 2}}) == {"a": 1.0, "b_c": 2.0}
    with pytest.raises(TypeError):
        stats_fields(42)


def test_as_source_guesses_labels_and_strips_credentials():
    source = as_source(Producer())
    assert source.labels() == ("s3://bucket/run", "producer", "p7")
    assert source.fields()["commit_attempts"] == 3.0


def test_as_source_explicit_labels_win():
    source = as_source(Producer(), namespace="file:///x", role="consumer", id="r1")
    assert source.labels() == ("file:///x", "consumer", "r1")
    again = as_source(source, id="r2")
    assert isinstance(again, StatsSource) and again.labels() == ("file:///x", "consumer", "r2")


def test_as_source_needs_stats():
    with pytest.raises(TypeError):
        as_source(object())  # type: ignore[arg-type]
