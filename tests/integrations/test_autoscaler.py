"""The autoscaler's wiring (issue 46) without Ray: signals from the namespace and the shards, decisions applied.

A fake pool and tally stand in for the actors; the trainer's reports and the
control records are real objects in a local namespace.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from torch_tgb.integrations._autoscale import AutoscalePolicy
from torch_tgb.integrations._scaler import Autoscaler
from torch_tgb.manifest import ControlChannel, TrainerStatus
from torch_tgb.manifest._json import dump_json
from torch_tgb.manifest.control import TRAINER_KEY


@dataclass
class FakePool:
    workers: list[str] = field(default_factory=lambda: ["a"])
    scaled: list[int] = field(default_factory=list)
    labels: list[int | None] = field(default_factory=lambda: [None])
    added: list[list[int | None]] = field(default_factory=list)
    dropped: list[list[int]] = field(default_factory=list)

    @property
    def target(self) -> int:
        return len(self.workers)

    def groups(self) -> list[int | None]:
        return list(self.labels)

    def scale(self, target: int, *, groups=(), drop=()) -> None:  # the driver applies it next round: here at once
        self.scaled.append(target)
        self.added.append(list(groups))
        self.dropped.append(list(drop))
        self.labels = (self.labels + list(groups) + [None] * target)[:target]
        self.workers = [f"w{i}" for i in range(target)]


@dataclass
class FakeTally:
    snaps: list[dict[str, float]] = field(default_factory=list)

    def live_snapshots(self) -> list[dict[str, float]]:
        return [dict(s) for s in self.snaps]


@dataclass
class FakeHead:
    num_steps: int


@dataclass
class FakeManifest:
    steps: int = 0

    def head(self) -> FakeHead:
        return FakeHead(self.steps)


_START = [time.time()]  # when the running test made its autoscaler


def report(channel: ControlChannel, step: int, stall: float, ago: float) -> None:
    """A trainer report stamped ``ago`` seconds before the test made its autoscaler (two give the trainer's rate)."""
    status = TrainerStatus(step, stall, _START[0] - ago, "rank0")
    channel.store.put(TRAINER_KEY, dump_json(status.to_json()))


def make(tmp_path: Path, policy: AutoscalePolicy, **kwargs) -> tuple[Autoscaler, FakePool, FakeTally, FakeManifest,
                                                                     ControlChannel]:
    _START[0] = time.time()
    channel = ControlChannel(str(tmp_path / "ns"))
    pool, tally, manifest = FakePool(), FakeTally(), FakeManifest()
    scaler = Autoscaler(policy, pool, tally, shards=8, manifest=manifest, channel=channel,  # type: ignore[arg-type]
                        interval_s=1e-6, stale_s=30.0, **kwargs)
    return scaler, pool, tally, manifest, channel


def test_stall_scales_up_pause_holds_calm_and_ahead_scales_down(tmp_path: Path) -> None:
    scaler, pool, tally, manifest, channel = make(tmp_path, AutoscalePolicy(1, 4, up_cooldown_s=0, down_cooldown_s=0))
    tally.snaps = [{"batch_s": 0.2, "paused": 0.0}]
    assert scaler.tick().direction == "hold"  # no trainer report yet: nothing to size by
    report(channel, 0, 0.4, ago=2.0)
    d = scaler.tick()  # waiting 40% with nothing ahead, its rate unknown yet: one more
    assert (d.direction, d.target, pool.scaled) == ("up", 2, [2])
    report(channel, 20, 0.4, ago=0.0)  # 10 steps/s, waiting 40%: needs 0.2 * 10 / 0.6 * 1.2 = 4 actors
    manifest.steps = 22  # the producers are 2 steps ahead
    d = scaler.tick()
    assert (d.direction, d.target, pool.scaled) == ("up", 4, [2, 4])
    assert (scaler.events[-1].before, scaler.events[-1].after) == (2, 4) and "waits 40%" in scaler.events[-1].reason
    tally.snaps = [{"batch_s": 0.5, "paused": 1.0}]  # paused by max_lag: never up, whatever the stall
    assert scaler.tick().direction == "hold" and pool.scaled == [2, 4]
    report(channel, 20, 0.0, ago=0.0)
    tally.snaps = [{"batch_s": 0.01, "paused": 0.0}]
    manifest.steps = 200  # far ahead and not waiting: one goes
    d = scaler.tick()
    assert (d.direction, d.target, pool.scaled) == ("down", 3, [2, 4, 3])
    assert [p.actors for p in scaler.timeline] == [1, 1, 2, 4, 4] and scaler.timeline[-1].lead == 180
    assert [e.after for e in scaler.events] == [2, 4, 3]


def test_a_costlier_mixture_ahead_grows_the_pool_first(tmp_path: Path) -> None:
    """Mixture-driven: a control record ahead of the producers doubles the share of the expensive source."""
    scaler, pool, tally, manifest, channel = make(tmp_path, AutoscalePolicy(1, 8, up_cooldown_s=0), sources={"web": 1})
    tally.snaps = [{"batch_s": 0.05, "paused": 0.0, "mix_step": 10.0, "docs_per_batch": 4.0, "cost:web": 0.001,
                    "cost:code": 0.004, "weight:web": 0.8, "weight:code": 0.2}]
    report(channel, 0, 0.0, ago=1.0)
    scaler.tick()
    report(channel, 10, 0.0, ago=0.0)  # 10 steps/s, not waiting: 0.05 * 10 * 1.2 -> 1 actor today
    manifest.steps = 100
    assert scaler.tick().direction == "hold"  # 1 actor does
    channel.set_mix({"web": 0.4, "code": 0.6}, step=32)  # ahead of the producers' step 10
    d = scaler.tick()
    ratio = (0.4 * 0.001 + 0.6 * 0.004) / (0.8 * 0.001 + 0.2 * 0.004)
    assert scaler.timeline[-1].cost_ratio == pytest.approx(ratio)
    assert d.direction == "up" and d.target == 2 and "code" in d.reason  # ceil(0.05 * 1.75 * 10 * 1.2) = 2
    tally.snaps[0]["mix_step"] = 40.0  # the producers passed the record: nothing ahead any more
    scaler.tick()
    assert scaler.timeline[-1].cost_ratio == 1.0
    plan = scaler.partition()
    assert plan is not None and {p.name for g in plan.groups for p in g.parts} == {"web", "code"}


def test_stale_or_unreadable_trainer_reports_are_not_signals(tmp_path: Path, caplog) -> None:
    scaler, pool, tally, manifest, channel = make(tmp_path, AutoscalePolicy(1, 4, up_cooldown_s=0))
    report(channel, 0, 0.9, ago=60.0)  # older than stale_s=30: the trainer may be gone
    d = scaler.tick()
    assert d.direction == "hold" and scaler.timeline[-1].stall is None
    channel.store.put(TRAINER_KEY, b"{not json")
    with caplog.at_level(logging.WARNING, logger="torch_tgb.integrations.ray"):
        assert scaler.tick().direction == "hold"
    assert "trainer status unreadable" in caplog.text and pool.scaled == []


def test_a_schedule_step_ahead_is_priced_too(tmp_path: Path) -> None:
    """Mixture-driven without records: the workers report the Mix schedule's weights 64 steps on."""
    scaler, pool, tally, manifest, channel = make(tmp_path, AutoscalePolicy(1, 8, up_cooldown_s=0))
    tally.snaps = [{"batch_s": 0.05, "paused": 0.0, "mix_step": 10.0, "cost:web": 0.001, "cost:code": 0.004,
                    "weight:web": 0.8, "weight:code": 0.2, "ahead:web": 0.4, "ahead:code": 0.6}]
    report(channel, 0, 0.0, ago=1.0)
    scaler.tick()
    report(channel, 10, 0.0, ago=0.0)
    manifest.steps = 100
    d = scaler.tick()
    assert scaler.timeline[-1].cost_ratio == pytest.approx(1.75)
    assert (d.direction, d.target) == ("up", 2) and "code" in d.reason


def test_the_worker_reports_what_the_driver_prices() -> None:
    """ShardMeter's snapshot: the Mix's costs, weights in force and its schedule's weights ahead."""
    from torchdata.nodes import IterableWrapper

    from torch_tgb.datapipes import Mix
    from torch_tgb.integrations._worker import SCHEDULE_LOOKAHEAD, MeteredNode, ShardMeter

    def schedule(step: int) -> dict[str, float]:
        return {"web": 0.8, "code": 0.2} if step < 40 else {"web": 0.4, "code": 0.6}

    mix = Mix({name: IterableWrapper([(name, i) for i in range(100)]) for name in ("web", "code")}, schedule,
              seed=0, documents_per_step=1)
    meter = ShardMeter()
    node = MeteredNode(mix, meter)
    for _ in range(10):
        next(node)
    snap = meter.snapshot()
    assert snap["mix_step"] == 10 and 10 + SCHEDULE_LOOKAHEAD >= 40
    assert snap["weight:web"] == pytest.approx(0.8) and snap["ahead:code"] == pytest.approx(0.6)
    assert snap["batch_s"] > 0 and {"cost:web", "cost:code"} <= set(snap)


def test_an_unreadable_head_holds_the_pool_and_says_so(tmp_path: Path, caplog) -> None:
    from torch_tgb.errors import StorageError

    scaler, pool, tally, manifest, channel = make(tmp_path, AutoscalePolicy(1, 4, up_cooldown_s=0))

    def head() -> FakeHead:
        raise StorageError("ns: GET _tgb/head timed out")

    manifest.head = head  # type: ignore[method-assign]
    report(channel, 0, 0.9, ago=0.0)
    with caplog.at_level(logging.WARNING, logger="torch_tgb.integrations.ray"):
        assert scaler.tick() is None
    assert "signals unreadable" in caplog.text and pool.scaled == [] and scaler.timeline == []


def two_group_plan():
    from torch_tgb.integrations._partition import SourceSpec
    from torch_tgb.integrations._shard_plan import plan_shards

    # each source fills most of a pod: one group each; web's batches cost more, so by share alone it comes first
    plan = plan_shards({"web": SourceSpec(600, 0.15), "code": SourceSpec(600, 0.1)}, pod_memory_bytes=1000,
                       latency_budget_s=0.1, spread=3)
    code = next(j for j, g in enumerate(plan.groups) if g.parts[0].name == "code")
    return plan, code


def planned(tmp_path: Path, plan, *, steps: int) -> tuple[Autoscaler, FakePool, FakeTally, ControlChannel]:
    """An autoscaler of a fleet planned by ``plan``: one actor per group, each running a shard at its cost."""
    scaler, pool, tally, manifest, channel = make(tmp_path, AutoscalePolicy(1, 8, up_cooldown_s=0), plan=plan,
                                                  runnable=lambda: list(plan.shards))
    pool.labels, pool.workers = [0, 1], ["a", "b"]
    manifest.steps = steps
    tally.snaps = running(plan, {j: plan.groups[j].latency_s for j in range(len(plan.groups))})
    return scaler, pool, tally, channel


def running(plan, costs: dict[int, float]) -> list[dict[str, float]]:
    """One running shard per group (its first), with its seconds per batch."""
    return [{"shard": float(plan.shard_groups().index(j)), "batch_s": c, "paused": 0.0} for j, c in costs.items()]


def test_a_weight_doubled_by_a_control_record_sends_the_next_actor_to_its_source(tmp_path: Path) -> None:
    """Mixture-driven scaling by source: the stall says grow, the record ahead says which source first."""
    plan, code = two_group_plan()
    web = 1 - code
    for record in (False, True):
        scaler, pool, tally, channel = planned(tmp_path / str(record), plan, steps=5)
        if record:  # ahead of the namespace's 5 steps: code's weight doubles
            channel.set_mix({"web": 1.0, "code": 2.0}, step=64)
        report(channel, 5, 0.5, ago=0.0)  # the trainer waits half the time: one more actor
        d = scaler.tick()
        assert (d.direction, d.target) == ("up", 3)
        # without the record web's dearer batches win the actor; with it, code (its group rises) does
        assert pool.added == [[code if record else web]], record
        assert scaler.events[-1].groups == (plan.group_name(code if record else web),)


def test_a_group_whose_measured_cost_rises_gets_the_next_actor(tmp_path: Path) -> None:
    plan, code = two_group_plan()
    web = 1 - code
    for rises in (False, True):
        scaler, pool, tally, channel = planned(tmp_path / str(rises), plan, steps=50)
        report(channel, 0, 0.0, ago=1.0)
        assert scaler.tick().direction == "hold"  # the costs as first seen: the base
        tally.snaps = running(plan, {web: 0.15, code: 0.3 if rises else 0.1})  # code's batches 3x dearer
        report(channel, 50, 0.5, ago=0.0)
        assert scaler.tick().direction == "up"
        assert pool.added[-1][0] == (code if rises else web), rises  # the first added actor


def test_no_actor_for_a_rising_source_while_paused_by_max_lag(tmp_path: Path) -> None:
    plan, code = two_group_plan()
    scaler, pool, tally, channel = planned(tmp_path, plan, steps=5)
    for snap in tally.snaps:
        snap["paused"] = 1.0  # the producers are as far ahead as the checkpoints allow
    channel.set_mix({"web": 1.0, "code": 2.0}, step=64)
    report(channel, 5, 0.5, ago=0.0)
    assert scaler.tick().direction == "hold" and pool.scaled == [] and scaler.events == []
    for snap in tally.snaps:
        snap["paused"] = 0.0  # the pause ends: the rising source gets its actor
    assert scaler.tick().direction == "up" and pool.added == [[code]]


def test_a_planned_fleets_group_mixes_do_not_stand_for_the_mixture(tmp_path: Path) -> None:
    """Each group's Mix weighs only its own sources (1.0 each here): the mixture in force is the plan's."""
    from torch_tgb.integrations._partition import SourceSpec
    from torch_tgb.integrations._shard_plan import plan_shards

    plan = plan_shards({"web": SourceSpec(600, 0.15), "code": SourceSpec(600, 0.1)}, {"web": 0.8, "code": 0.2},
                       pod_memory_bytes=1000, latency_budget_s=0.1, spread=3)
    code = next(j for j, g in enumerate(plan.groups) if g.parts[0].name == "code")
    scaler, pool, tally, channel = planned(tmp_path, plan, steps=5)
    for snap, j in zip(tally.snaps, range(len(plan.groups))):
        snap.update({"mix_step": 5.0, f"weight:{plan.groups[j].parts[0].name}": 1.0})
    channel.set_mix({"web": 0.7, "code": 0.3}, step=64)  # code: 0.2 -> 0.3 of the mixture; web falls
    report(channel, 5, 0.5, ago=0.0)
    d = scaler.tick()
    assert d.direction == "up" and pool.added == [[code]]  # code rises against 0.2, not against 1.0
    assert scaler.timeline[-1].cost_ratio == pytest.approx((0.7 * 0.15 + 0.3 * 0.1) / (0.8 * 0.15 + 0.2 * 0.1))
