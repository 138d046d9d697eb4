"""The driver's side of autoscaling: gather a fleet's signals, ask the policy, resize the pool, keep a timeline.

:class:`Autoscaler` runs on the fleet's driver thread every
``FleetConfig.autoscale_interval_s``. Its signals (``_autoscale.FleetSignals``):

- the trainer's step and stall fraction from ``_tgb/control/trainer.json``
  (``ControlChannel.report_trainer``, rank 0), its rate from two reports;
  ignored once older than ``FleetConfig.trainer_stale_s``;
- the namespace's committed steps (one head read): ``lead`` = committed - the
  trainer's step;
- per running shard, from its worker's progress report: paused by
  ``max_lag``, seconds per batch in the pipeline, and, when the pipeline has a
  ``Mix``, each source's measured cost per document, its weight in force and
  the Mix's step;
- the control records ahead of the producers (``_tgb/control/mix/``: one LIST
  per round, each new object read once), else the weights of the Mix's
  schedule ``SCHEDULE_LOOKAHEAD`` steps ahead (the workers report them): their
  weights against the current ones give the mixture-driven ``cost_ratio``.

Every round adds a :class:`TimelinePoint`; every change an :class:`AutoscaleEvent`
(both in the :class:`~torch_tgb.integrations.ray.FleetReport`). Scaling
down goes through ``WorkerPool.scale``: the driver kills the surplus actors
(idle ones first) and requeues their shards, which resume at their last
commit, fenced as for any restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torch_tgb.errors import TGBError
from torch_tgb.integrations._allocation import drop_order, groups_to_add
from torch_tgb.integrations._autoscale import AutoscalePolicy, Decision, FleetSignals
from torch_tgb.integrations._fleet_metrics import ShardTally
from torch_tgb.integrations._partition import PartitionPlan, SourceSpec, partition_sources
from torch_tgb.integrations._ray_pool import WorkerPool
from torch_tgb.integrations._shard_plan import ShardPlan, group_sizes, shares
from torch_tgb.manifest import ControlChannel, Manifest, MixRecord, TrainerStatus
from torch_tgb.manifest.control import MIX_PREFIX, parse_block

__all__ = ["AutoscaleEvent", "Autoscaler", "TimelinePoint"]

log = logging.getLogger("torch_tgb.integrations.ray")

COST_KEY, WEIGHT_KEY, AHEAD_KEY = "cost:", "weight:", "ahead:"


@dataclass(frozen=True)
class TimelinePoint:
    """One round of the autoscaler: seconds since the fleet started and what it saw and ran."""

    t: float
    #: actors alive at the start of the round, and the number the round asked for
    actors: int
    target: int
    lead: int | None
    stall: float | None
    paused: bool
    batch_s: float | None
    cost_ratio: float


@dataclass(frozen=True)
class AutoscaleEvent:
    """A change of the pool's size: from ``before`` to ``after`` actors at ``t``, and why."""

    t: float
    before: int
    after: int
    reason: str
    stall: float | None
    lead: int | None
    paused: bool
    #: a fleet planned by source: the groups the added actors serve ("any": no group had a shard left)
    groups: tuple[str, ...] = ()


class Autoscaler:
    """Sizes ``pool`` by ``policy`` from the signals above; driver thread only."""

    def __init__(
        self, policy: AutoscalePolicy, pool: WorkerPool, tally: ShardTally, *, shards: int, manifest: Manifest,
        channel: ControlChannel, interval_s: float, stale_s: float, sources: Mapping[str, int] | None = None,
        pod_memory_bytes: int = 8 << 30, plan: ShardPlan | None = None,
        runnable: Callable[[], list[int]] | None = None,
    ) -> None:
        self.policy, self.pool, self.tally = policy, pool, tally
        self.shards, self.manifest, self.channel = shards, manifest, channel
        self.interval_s, self.stale_s = interval_s, stale_s
        self.sources = dict(sources or {})
        self.pod_memory_bytes = pod_memory_bytes
        self.started = time.monotonic()
        self.timeline: list[TimelinePoint] = []
        self.events: list[AutoscaleEvent] = []
        self._next = 0.0
        self._last_change: float | None = None
        self._status: TrainerStatus | None = None
        self._rate: float | None = None
        self._records: dict[str, MixRecord | None] = {}  # every block object read so far (None: a claim)
        self._costs: dict[str, float] = {}
        self._weights: dict[str, float] = {}
        self._batch_s: float | None = None
        self.plan = plan
        self.runnable = runnable
        self._ahead: dict[str, float] = {}  # the weights the producers meet next (normalised)
        self._rising: set[int] = set()  # the plan's groups that rise this round
        self._group_cost: dict[int, float] = {}  # each group's seconds per batch at the last change

    # --- signals -------------------------------------------------------------------------

    def _trainer(self, now_wall: float) -> TrainerStatus | None:
        try:
            status = self.channel.trainer_status()
        except TGBError as e:  # a torn or foreign report: size without the trainer this round, say why
            log.warning("autoscale: trainer status unreadable (%s): sizing without it", e)
            return None
        if status is None:
            return None
        last = self._status
        if last is not None and status.time > last.time and status.step >= last.step:
            self._rate = (status.step - last.step) / (status.time - last.time)
        if last is None or status.time != last.time:
            self._status = status
        return status if now_wall - status.time <= self.stale_s else None

    def _all_records(self) -> list[MixRecord]:
        """Every control record in step order: one LIST, each block object read once."""
        for key in self.channel.store.list(MIX_PREFIX):
            name = key[len(MIX_PREFIX) : -len(".json")]
            if key in self._records or not key.endswith(".json") or not name.isdigit():
                continue
            try:
                data = self.channel.store.get(key)
                self._records[key] = parse_block(data, start=int(name), block=self.channel.block,
                                                 what=f"{self.channel.url}/{key}")
            except TGBError as e:  # a producer stops on it by name; the fleet's sizing goes on without it
                log.warning("autoscale: control object %s unreadable: %s", key, e)
                self._records[key] = None
        return sorted((r for r in self._records.values() if r is not None), key=lambda r: r.step)

    def _mixture(self, snaps: list[dict[str, float]], committed: int) -> tuple[float, tuple[str, ...]]:
        """``cost_ratio`` and the rising sources: the next record's weights against the ones in force.

        The weights in force: the shards' Mix reports, else (and always in a
        fleet planned by source, whose Mixes weigh only their group) the record
        in force at the producers' step, else the plan's. The costs: measured
        by the Mix (for every source of the plan), else the plan's. The
        producers' step: the Mix's, else the namespace's committed steps (a
        fleet planned by source needs no Mix).
        """
        costs: dict[str, list[float]] = {}
        weights: dict[str, list[float]] = {}
        scheduled: dict[str, list[float]] = {}
        for snap in snaps:
            for key, value in snap.items():
                if key.startswith(COST_KEY):
                    costs.setdefault(key[len(COST_KEY):], []).append(value)
                elif key.startswith(WEIGHT_KEY):
                    weights.setdefault(key[len(WEIGHT_KEY):], []).append(value)
                elif key.startswith(AHEAD_KEY):
                    scheduled.setdefault(key[len(AHEAD_KEY):], []).append(value)
        if costs:
            self._costs = {k: sum(v) / len(v) for k, v in costs.items()}
        if weights:
            self._weights = {k: sum(v) / len(v) for k, v in weights.items()}
        steps = [s["mix_step"] for s in snaps if "mix_step" in s]
        step = int(min(steps)) if steps else committed
        records = self._all_records() if steps or self.plan is not None else []
        plan = self.plan
        in_force = [r for r in records if r.step <= step]
        # a planned fleet's Mixes weigh only their group's sources: the mixture in force is the fleet's
        mixture = dict(in_force[-1].weights) if in_force else dict(plan.weights) if plan is not None else {}
        now_weights = mixture if plan is not None else self._weights or mixture
        cost_of = self._costs
        if plan is not None and not set(plan.sources) <= set(cost_of):  # one unit for all: the plan's
            cost_of = {k: v.batch_s for k, v in plan.sources.items()}
        ahead = [r for r in records if r.step > step]
        if ahead:  # the next control record, else the schedule's weights a lookahead on (the workers report them)
            new = _normalised(ahead[0].weights)
        elif scheduled:
            new = _normalised({k: sum(v) / len(v) for k, v in scheduled.items()})
        else:
            self._ahead = _normalised(now_weights)
            return 1.0, ()
        self._ahead = new
        if not cost_of or not now_weights:
            return 1.0, ()
        now = _normalised(now_weights)
        cost_now = sum(now.get(k, 0.0) * c for k, c in cost_of.items())
        cost_new = sum(new.get(k, 0.0) * c for k, c in cost_of.items())
        rising = tuple(sorted(k for k in new if new[k] > now.get(k, 0.0) * 1.1))
        return (cost_new / cost_now if cost_now > 0 else 1.0), rising

    def _rising_groups(self, snaps: list[dict[str, float]], rising: tuple[str, ...]) -> set[int]:
        """Groups of a source plan that hold a rising source, or whose measured seconds per batch rose.

        A group's cost is the mean ``batch_s`` of its running shards; it rises
        when it exceeds the one seen at the last change of the pool by more
        than the policy's ``ratio_tolerance``.
        """
        plan = self.plan
        if plan is None:
            return set()
        out = {j for j, g in enumerate(plan.groups) if any(p.name in rising for p in g.parts)}
        per_group: dict[int, list[float]] = {}
        for snap in snaps:
            if snap.get("batch_s", 0.0) > 0 and "shard" in snap and 0 <= int(snap["shard"]) < plan.num_shards:
                per_group.setdefault(plan.group_of(int(snap["shard"])), []).append(snap["batch_s"])
        for j, values in per_group.items():
            cost = sum(values) / len(values)
            base = self._group_cost.setdefault(j, cost)
            if cost > base * (1.0 + self.policy.ratio_tolerance):
                out.add(j)
        return out

    def signals(self) -> FleetSignals:
        now = time.monotonic()
        status = self._trainer(time.time())
        snaps = self.tally.live_snapshots()
        head = self.manifest.head()
        batch = [s["batch_s"] for s in snaps if s.get("batch_s", 0.0) > 0]
        if batch:
            self._batch_s = sum(batch) / len(batch)
        ratio, rising = self._mixture(snaps, head.num_steps)
        self._rising = self._rising_groups(snaps, rising)
        if self.plan is not None:  # name the groups whose cost rose too (the decision's reason says why)
            rising = tuple(sorted({*rising, *(self.plan.group_name(j) for j in self._rising
                                              if not any(p.name in rising for p in self.plan.groups[j].parts))}))
        return FleetSignals(
            time=now, actors=self.pool.target, shards=self.shards,  # the size asked for: starting ones count
            stall=None if status is None else status.stall, rate=None if status is None else self._rate,
            lead=None if status is None else head.num_steps - status.step,
            paused=any(s.get("paused", 0.0) >= 1.0 for s in snaps), batch_s=self._batch_s, cost_ratio=ratio,
            rising=rising,
        )

    # --- a round ---------------------------------------------------------------------------

    def tick(self) -> Decision | None:
        """Decide and apply, at most every ``interval_s``; the decision (``None``: not yet time, or no signals)."""
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.interval_s
        try:
            s = self.signals()
        except TGBError as e:  # the head unreadable this round (a store hiccup): the pool keeps its size
            log.warning("autoscale: signals unreadable (%s): holding %d actors this round", e, self.pool.target)
            return None
        decision = self.policy.decide(s, self._last_change)
        t = now - self.started
        self.timeline.append(TimelinePoint(t, len(self.pool.workers), decision.target, s.lead, s.stall, s.paused, s.batch_s,
                                           s.cost_ratio))
        if decision.target != s.actors:
            self._last_change = now
            groups, drop = self._allocate(decision.target - s.actors)
            names = tuple("any" if g is None else self.plan.group_name(g) for g in groups) if self.plan else ()
            self.events.append(AutoscaleEvent(t, s.actors, decision.target, decision.reason, s.stall, s.lead,
                                              s.paused, names))
            log.info("autoscale: %d -> %d actors: %s%s", s.actors, decision.target, decision.reason,
                     f" (new actors for {', '.join(names)})" if names else "")
            self.pool.scale(decision.target, groups=groups, drop=drop)
            self._group_cost.clear()  # a group's cost rises against what it was at this change
        return decision

    def _allocate(self, change: int) -> tuple[list[int | None], list[int]]:
        """The groups of the actors added (``change`` > 0) or the order groups lose theirs (< 0)."""
        plan = self.plan
        if plan is None:
            return [], []
        measured = self._costs if set(plan.sources) <= set(self._costs) else None  # else the plan's, one unit
        shares_ = shares(plan, self._ahead or plan.weights, measured)
        actors = group_sizes(self.pool.groups(), len(plan.groups))
        if change > 0:
            runnable = self.runnable() if self.runnable is not None else list(plan.shards)
            return groups_to_add(change, shares=shares_, actors=actors, runnable=runnable, rising=self._rising), []
        return [], drop_order(shares=shares_, actors=actors, rising=self._rising)

    def partition(self) -> PartitionPlan | None:
        """The §5.1 plan from the declared memory and the measured costs (None: nothing measured or declared)."""
        if not self._costs and not self.sources:
            return None
        docs = max((s.get("docs_per_batch", 0.0) for s in self.tally.live_snapshots()), default=0.0) or 1.0
        names = set(self._costs) | set(self.sources)
        specs = {n: SourceSpec(int(self.sources.get(n, 0)), self._costs.get(n, 0.0) * docs) for n in names}
        rate = self._rate or 0.0
        budget = 1.0 / rate if rate > 0 else max(self._batch_s or 1.0, 1e-3)
        return partition_sources(specs, _normalised(self._weights) if self._weights else None,
                                 pod_memory_bytes=self.pod_memory_bytes, latency_budget_s=budget)


def _normalised(weights: Mapping[str, float]) -> dict[str, float]:
    total = sum(max(w, 0.0) for w in weights.values())
    return {k: max(w, 0.0) / total for k, w in weights.items()} if total > 0 else {}
