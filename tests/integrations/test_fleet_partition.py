"""Source auto-partitioning (issue 46, OVERLORD seed 004 §5.1): heavy sources split, light ones grouped."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.integrations._partition import SourceSpec, partition_sources

POD = 1000

sources = st.dictionaries(
    st.sampled_from([f"s{i}" for i in range(8)]),
    st.builds(SourceSpec, memory_bytes=st.integers(0, 5 * POD), batch_s=st.floats(0, 2)),
    min_size=1,
)


@settings(max_examples=300, deadline=None)
@given(sources, st.floats(0.01, 1), st.floats(0, 0.1))
def test_every_source_whole_every_group_within_the_pod_and_the_budget(
    specs: dict[str, SourceSpec], budget: float, overhead: float
) -> None:
    plan = partition_sources(specs, pod_memory_bytes=POD, latency_budget_s=budget, overhead_s=overhead)
    parts = [p for g in plan.groups for p in g.parts]
    for name, spec in specs.items():
        mine = sorted((p for p in parts if p.name == name), key=lambda p: p.part)
        n = max(1, math.ceil(spec.memory_bytes / POD))
        assert [p.part for p in mine] == list(range(n)) and {p.parts for p in mine} == {n}  # 1. split to fit
        assert math.isclose(sum(p.memory_bytes for p in mine), spec.memory_bytes, abs_tol=1e-6)
        assert math.isclose(sum(p.latency_s for p in mine), spec.batch_s, rel_tol=1e-9, abs_tol=1e-12)
    for g in plan.groups:
        assert g.memory_bytes <= POD + 1e-6 or len(g.parts) == 1  # 2. a group fits a pod
        assert g.workers >= 1 and g.latency_s / g.workers <= budget * (1 + 1e-9)  # 3. each worker within budget
        assert g.workers == 1 or g.latency_s / (g.workers - 1) > budget * (1 - 1e-9)  # and no more workers than that
    assert plan.workers == sum(g.workers for g in plan.groups)


def test_heavy_split_light_grouped_and_a_doubled_weight_doubles_its_workers() -> None:
    specs = {"web": SourceSpec(2500, 0.3), "code": SourceSpec(100, 0.2), "math": SourceSpec(100, 0.05)}
    plan = partition_sources(specs, pod_memory_bytes=POD, latency_budget_s=0.1)
    named = [[(p.name, p.part) for p in g.parts] for g in plan.groups]
    assert named == [[("math", 0), ("web", 0)], [("web", 1)], [("web", 2), ("code", 0)]]  # 833 B shards, pods of 1000
    assert "web[1/3]" in plan.summary() and f"{plan.workers} workers" in plan.summary()
    alone = {"web": SourceSpec(900, 0.3), "code": SourceSpec(900, 0.2)}  # one pod each
    before = partition_sources(alone, {"web": 0.75, "code": 0.25}, pod_memory_bytes=POD, latency_budget_s=0.01)
    after = partition_sources(alone, {"web": 0.5, "code": 0.5}, pod_memory_bytes=POD, latency_budget_s=0.01)
    workers = [{g.parts[0].name: g.workers for g in plan.groups} for plan in (before, after)]
    assert workers == [{"code": 5, "web": 23}, {"code": 10, "web": 15}]  # code's weight doubles: so do its workers


@pytest.mark.parametrize("kwargs", [{"pod_memory_bytes": 0, "latency_budget_s": 1.0},
                                    {"pod_memory_bytes": 1, "latency_budget_s": 0.0}])
def test_bad_inputs_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        partition_sources({"a": SourceSpec(1, 0.1)}, **kwargs)
    with pytest.raises(ValueError, match="'a'"):
        partition_sources({"a": SourceSpec(-1, 0.1)}, pod_memory_bytes=1, latency_budget_s=1.0)
