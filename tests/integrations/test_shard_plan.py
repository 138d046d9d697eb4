"""Source auto-partitioning applied (issue 46, seed 004 §5.1): shards bound to source groups, actors to groups.

Pure parts: the plan's cut of every source (each unit read by exactly one
shard), the starting actors per group, who gets an added actor (the rising
group first), which shard a dedicated actor claims; then the plan recorded in
a namespace (a restart uses it, another is refused) and shown by ``tgb inspect``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import FleetError
from torch_tgb.integrations._allocation import drop_order, groups_to_add
from torch_tgb.integrations._partition import SourceSpec
from torch_tgb.integrations._plan_record import load_plan, plan_key, record_plan, source_plan
from torch_tgb.integrations._shard_plan import ShardPlan, plan_shards, shares
from torch_tgb.integrations._shards import ShardBoard
from torch_tgb.storage import open_store

from tests.integrations.test_fleet_partition import POD
from tests.integrations.test_fleet_partition import sources as specs


@settings(max_examples=200, deadline=None)
@given(specs, st.floats(0.05, 1), st.integers(1, 3), st.integers(0, 200))
def test_every_unit_of_every_source_is_read_by_exactly_one_shard(
    sources: dict[str, SourceSpec], budget: float, spread: int, units: int
) -> None:
    plan = plan_shards(sources, pod_memory_bytes=POD, latency_budget_s=budget, spread=spread)
    read: dict[str, list[int]] = {name: [] for name in sources}
    for i in range(plan.num_shards):
        shard = plan.shard(i)
        assert (shard.shard, shard.count, shard.group) == (i, plan.num_shards, plan.group_of(i))
        for s in shard.sources:
            read[s.name] += list(s.units(units))
    assert {name: sorted(got) for name, got in read.items()} == {name: list(range(units)) for name in sources}
    assert plan.shard_groups() == tuple(plan.group_of(i) for i in range(plan.num_shards))
    assert list(plan.shards) == [g.workers * spread for g in plan.groups]
    again = ShardPlan.from_json(json.loads(json.dumps(plan.to_json())), what="test")
    assert again == plan and again.to_json() == plan.to_json()  # what a restart reads is what was planned


@settings(max_examples=200, deadline=None)
@given(specs, st.integers(1, 40))
def test_starting_actors_follow_the_planned_workers(sources: dict[str, SourceSpec], actors: int) -> None:
    plan = plan_shards(sources, pod_memory_bytes=POD, latency_budget_s=0.1)
    groups = plan.initial_groups(actors)
    counts = [groups.count(j) for j in range(len(plan.groups))]
    assert len(groups) == min(actors, plan.num_shards) and all(c <= n for c, n in zip(counts, plan.shards))
    if actors >= len(plan.groups):
        assert min(counts) >= 1  # every group runs
    want = [g.workers for g in plan.groups]
    for a in range(len(want)):  # a group planning more workers never starts with fewer, where shards allow
        for b in range(len(want)):
            if want[a] > want[b]:
                assert counts[a] >= counts[b] or counts[a] == plan.shards[a], (a, b, counts)
    if len(plan.groups) == 1:
        assert counts == [min(actors, plan.num_shards)]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.floats(0, 1), min_size=n, max_size=n), st.lists(st.integers(0, 4), min_size=n, max_size=n),
    st.lists(st.integers(0, 6), min_size=n, max_size=n), st.sets(st.integers(0, n - 1)))), st.integers(0, 8))
def test_added_actors_go_to_rising_groups_first_and_only_where_a_shard_waits(case, add: int) -> None:
    shares_, actors, runnable, rising = case
    got = groups_to_add(add, shares=shares_, actors=actors, runnable=runnable, rising=rising)
    assert len(got) == add
    have = list(actors)
    for g in got:
        if g is None:  # nothing runnable left for any group
            assert all(h >= r for h, r in zip(have, runnable))
            continue
        assert have[g] < runnable[g]
        open_rising = [j for j in rising if have[j] < runnable[j]]
        assert not open_rising or g in rising  # a rising group with a shard to run comes first
        have[g] += 1
    assert got == groups_to_add(add, shares=shares_, actors=actors, runnable=runnable, rising=rising)
    order = drop_order(shares=shares_, actors=actors, rising=rising)
    assert sorted(order) == list(range(len(actors)))
    assert all(order.index(a) < order.index(b) for a in range(len(actors)) if a not in rising for b in rising)


def test_a_doubled_weight_moves_the_next_actor_to_its_group() -> None:
    plan = plan_shards({"web": SourceSpec(600, 0.1), "code": SourceSpec(600, 0.1)}, pod_memory_bytes=POD,
                       latency_budget_s=0.1, spread=3)
    code = next(j for j, g in enumerate(plan.groups) if g.parts[0].name == "code")
    even = shares(plan, {"web": 0.5, "code": 0.5})
    doubled = shares(plan, {"web": 1 / 3, "code": 2 / 3})
    assert even == [0.5, 0.5] and doubled[code] == pytest.approx(2 / 3)
    assert groups_to_add(1, shares=doubled, actors=[1, 1], runnable=[3, 3]) == [code]  # by share alone
    assert groups_to_add(1, shares=even, actors=[1, 1], runnable=[3, 3], rising={code}) == [code]  # rising first
    assert groups_to_add(1, shares=even, actors=[1, 1], runnable=[3, 3], rising={1 - code}) == [1 - code]
    assert groups_to_add(2, shares=doubled, actors=[1, 1], runnable=[1, 1]) == [None, None]  # nothing left to run


def test_a_dedicated_worker_claims_its_groups_shard_first() -> None:
    board = ShardBoard(prefix="fleet", count=4, groups=[0, 0, 1, 1])
    assert board.claim("w1", 1) == 2 and board.claim("w2") == 0  # its group's first; undedicated: the queue's
    assert board.claim("w3", 1) == 3 and board.claim("w4", 1) == 1  # none of its group left: any, not idle
    assert board.runnable(2) == [2, 2]
    board.finish(2)
    board.requeue(3)
    assert board.runnable(2) == [2, 1] and board.claim("w5", 0) == 3


def test_the_plan_is_recorded_once_and_a_restart_uses_it(tmp_path: Path, caplog) -> None:
    ns = str(tmp_path / "ns")
    sources = {"web": SourceSpec(2500, 0.3), "code": SourceSpec(100, 0.2)}
    first = source_plan(ns, sources, {"web": 0.7, "code": 0.3}, pod_memory_bytes=POD, latency_budget_s=0.1)
    store = open_store(ns)
    assert store.exists(plan_key("fleet")) and load_plan(store, "fleet") == first
    # measured costs changed: the namespace keeps its plan (its shards' sources are fixed), and says so
    with caplog.at_level(logging.WARNING, logger="torch_tgb.integrations.ray"):
        again = source_plan(ns, {"web": SourceSpec(2500, 0.9), "code": SourceSpec(100, 0.2)},
                            pod_memory_bytes=POD, latency_budget_s=0.1)
    assert again == first and "keeps its recorded source plan" in caplog.text
    assert record_plan(store, "fleet", first) == first  # the same plan again: fine
    other = plan_shards(sources, pod_memory_bytes=POD, latency_budget_s=0.05)
    with pytest.raises(FleetError, match="source plan recorded at _tgb/control/fleet/fleet.json"):
        record_plan(store, "fleet", other)
    assert record_plan(store, "other-job", other) == other  # another job, its own plan
    store.put(plan_key("broken"), b'{"format": "tgb-fleet-plan/9"}')
    with pytest.raises(FleetError, match="tgb-fleet-plan/9"):
        load_plan(store, "broken")
    store.close()


def test_tgb_inspect_shows_the_recorded_plan(tmp_path: Path, capsys) -> None:
    import torch

    import torch_tgb as tgb
    import torch_tgb.cli.main as cli_main

    ns = str(tmp_path / "ns")
    with tgb.Producer(ns, producer_id="p0", layout=tgb.Layout(dp=1)) as producer:  # a namespace to inspect
        producer.append({"input_ids": torch.zeros(2, 4, dtype=torch.int32)})
    plan = source_plan(ns, {"web": SourceSpec(2500, 0.3), "code": SourceSpec(100, 0.2)}, pod_memory_bytes=POD,
                       latency_budget_s=0.1)
    assert cli_main.main(["inspect", ns, "--json", "--no-sizes"]) == 0
    shown = json.loads(capsys.readouterr().out)["fleet_plans"]["fleet"]
    assert shown["num_shards"] == plan.num_shards and len(shown["groups"]) == len(plan.groups)
    assert shown["groups"][-1]["shards"][1] == plan.num_shards - 1
    assert cli_main.main(["inspect", ns]) == 0
    text = capsys.readouterr().out
    assert "fleet plan 'fleet'" in text and "web[1/3]" in text and f"{plan.num_shards} shards" in text
