"""ReadStats and ConsumerStats: the numbers a reader reports, and what a snapshot costs."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from torch_tgb.datapipes.read.stats import ConsumerStats, ReadStats, merge_stats, percentiles

samples = st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=300)


@given(samples, st.lists(st.floats(0, 100), min_size=1, max_size=4))
def test_percentiles_are_numpys_linear_percentiles(values, qs) -> None:
    got = percentiles(np.asarray(values), tuple(qs))
    np.testing.assert_allclose(got, np.percentile(values, qs), rtol=1e-12, atol=1e-9)


@given(samples, samples)
def test_a_snapshot_follows_every_new_latency(first, more) -> None:
    """The percentiles are kept between snapshots, and recomputed once a latency arrives."""
    stats = ReadStats()
    assert (stats.snapshot().fetch_p50_s, stats.snapshot().fetch_p95_s) == (0.0, 0.0)
    for v in first:
        stats.fetch_latency(v)
    a = stats.snapshot()
    assert (a.fetch_p50_s, a.fetch_p95_s) == tuple(percentiles(np.asarray(first), (50, 95)))
    assert stats.snapshot() == a
    for v in more:
        stats.fetch_latency(v)
    b = stats.snapshot()
    assert (b.fetch_p50_s, b.fetch_p95_s) == tuple(percentiles(np.asarray(first + more), (50, 95)))
    stats.reset()
    assert stats.snapshot() == ConsumerStats()


def test_the_latency_window_keeps_the_most_recent() -> None:
    from torch_tgb.datapipes.read.stats import _LATENCY_WINDOW

    stats = ReadStats()
    for v in [1000.0] * 10 + [1.0] * _LATENCY_WINDOW:
        stats.fetch_latency(v)
    assert stats.snapshot().fetch_p95_s == 1.0


def test_to_json_round_trips_every_field() -> None:
    fields = dataclasses.fields(ConsumerStats)
    s = ConsumerStats(**{f.name: (i + 0.5 if f.type == "float" else i) for i, f in enumerate(fields)})
    d = s.to_json()
    assert list(d) == [f.name for f in fields] and d == dataclasses.asdict(s)
    assert ConsumerStats.from_json(d) == s
    assert merge_stats([s]).steps == s.steps
