"""A source partition applied: the shards of a fleet's job, each bound to one group's slices of its sources.

:func:`~torch_tgb.integrations._partition.partition_sources` (seed 004 §5.1)
says which sources go together and how many workers each group needs;
:func:`plan_shards` turns that into the fleet's unit of work. Group ``j``
with ``w_j`` workers gets ``w_j * spread`` shards (``spread`` leaves room to
give a group more actors than planned when its weight or cost rises; an
actor runs one shard at a time). Shard ``i`` of a group of ``s`` shards
reads, of each source part ``(name, part, parts)`` in the group, every
``s``-th unit from the ``i``-th of that part (:meth:`SourceSlice.units`): a
heavy source's memory shards and a group's data-parallel shards compose into
one cut of the source, so every unit of every source is read by exactly one
shard.

The plan fixes what each shard produces, hence each producer id's content:
like the shard count, it is fixed for a namespace. A fleet records it
(``_plan_record.py``) and a restart uses the recorded plan. Pure: no Ray, no
I/O (``tests/integrations/test_shard_plan.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch_tgb.errors import FleetError
from torch_tgb.integrations._partition import PartitionPlan, SourceGroup, SourcePart, SourceSpec, partition_sources

__all__ = ["ShardPlan", "ShardSources", "SourceSlice", "plan_shards"]

PLAN_FORMAT = "tgb-fleet-plan/1"


@dataclass(frozen=True)
class SourceSlice:
    """Of source ``name``: contiguous part ``part`` of ``parts``, and in it every ``count``-th unit from ``index``."""

    name: str
    part: int
    parts: int
    index: int
    count: int

    def units(self, num_units: int) -> range:
        """The units (documents, files, row groups) of a source of ``num_units`` this slice reads."""
        start, stop = num_units * self.part // self.parts, num_units * (self.part + 1) // self.parts
        return range(start + self.index, stop, self.count)


@dataclass(frozen=True)
class ShardSources:
    """What shard ``shard`` of ``count`` reads: group ``group``'s slices of its sources."""

    shard: int
    count: int
    group: int
    sources: tuple[SourceSlice, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sources)


@dataclass(frozen=True)
class ShardPlan:
    """The partition, the shards of each group (``shards[j]``) and the weights it was planned with."""

    partition: PartitionPlan
    shards: tuple[int, ...]
    weights: Mapping[str, float]
    sources: Mapping[str, SourceSpec]

    def __post_init__(self) -> None:
        if len(self.shards) != len(self.partition.groups) or any(s < 1 for s in self.shards):
            raise ValueError(f"shards={self.shards}: one count >= 1 per group ({len(self.partition.groups)} groups)")

    @property
    def groups(self) -> tuple[SourceGroup, ...]:
        return self.partition.groups

    @property
    def num_shards(self) -> int:
        return sum(self.shards)

    @property
    def workers(self) -> int:
        """The workers the partition asks for (``sum w_j``): where a fleet starts."""
        return self.partition.workers

    def group_of(self, shard: int) -> int:
        """The group shard ``shard`` belongs to (shards are numbered group by group)."""
        if not 0 <= shard < self.num_shards:
            raise FleetError(f"shard {shard} is not one of the plan's {self.num_shards} shards")
        for j, n in enumerate(self.shards):
            if shard < n:
                return j
            shard -= n
        raise AssertionError("unreachable")  # pragma: no cover

    def shard_groups(self) -> tuple[int, ...]:
        """The group of every shard, in shard order (the fleet's board labels)."""
        return tuple(j for j, n in enumerate(self.shards) for _ in range(n))

    def shard(self, shard: int) -> ShardSources:
        """What shard ``shard`` reads (module docstring): call it in ``make_pipeline(shard, count)``."""
        j = self.group_of(shard)
        i = shard - sum(self.shards[:j])
        s = self.shards[j]
        slices = tuple(SourceSlice(p.name, p.part, p.parts, i, s) for p in self.groups[j].parts)
        return ShardSources(shard, self.num_shards, j, slices)

    def group_name(self, group: int) -> str:
        """``g<j>(web[0/3], code)``: a group as reports name it."""
        parts = self.groups[group].parts
        return f"g{group}(" + ", ".join(p.name if p.parts == 1 else f"{p.name}[{p.part}/{p.parts}]"
                                         for p in parts) + ")"

    def initial_groups(self, actors: int) -> list[int]:
        """The groups of ``actors`` starting actors: one per group first, then each group's planned share.

        With fewer actors than groups, the groups that plan the most workers
        get one; otherwise every group gets one and the rest go, one at a
        time, to the group furthest below ``actors * w_j / sum w`` (lower
        index on ties); never more actors for a group than its shards.
        """
        want = [g.workers for g in self.groups]
        counts = [0] * len(want)
        for _ in range(actors):
            open_ = [j for j in range(len(want)) if counts[j] < self.shards[j]]
            if not open_:
                break
            best = max(open_, key=lambda j: (counts[j] == 0, actors * want[j] / sum(want) - counts[j], -j))
            counts[best] += 1
        out: list[int] = []
        for round_ in range(max(counts, default=0)):
            out += [j for j in range(len(counts)) if counts[j] > round_]
        return out

    def summary(self) -> str:
        lines = [self.partition.summary().splitlines()[0] + f", {self.num_shards} shards"]
        lines += [f"  {self.group_name(j)}: {g.memory_bytes / 2**20:.0f} MiB, {g.latency_s * 1e3:.1f} ms/batch, "
                  f"{g.workers} w, shards {sum(self.shards[:j])}..{sum(self.shards[: j + 1]) - 1}"
                  for j, g in enumerate(self.groups)]
        return "\n".join(lines)

    # --- the recorded form (``_plan_record.py``) ------------------------------------------

    def to_json(self) -> dict[str, Any]:
        p = self.partition
        return {
            "format": PLAN_FORMAT, "pod_memory_bytes": p.pod_memory_bytes, "latency_budget_s": p.latency_budget_s,
            "weights": dict(self.weights),
            "sources": {k: {"memory_bytes": v.memory_bytes, "batch_s": v.batch_s} for k, v in self.sources.items()},
            "groups": [{"parts": [[q.name, q.part, q.parts, q.memory_bytes, q.latency_s] for q in g.parts],
                        "memory_bytes": g.memory_bytes, "latency_s": g.latency_s, "workers": g.workers,
                        "shards": n} for g, n in zip(p.groups, self.shards)],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, what: str) -> ShardPlan:
        """The plan as recorded; :class:`FleetError` naming ``what`` if it is not one."""
        if not isinstance(data, Mapping) or data.get("format") != PLAN_FORMAT:
            found = data.get("format") if isinstance(data, Mapping) else type(data).__name__
            raise FleetError(f"{what}: not a fleet plan of format {PLAN_FORMAT!r} (found {found!r}); written by a "
                             "newer torch_tgb? Upgrade, or run the fleet under another prefix")
        try:
            groups = tuple(
                SourceGroup(tuple(SourcePart(str(n), int(i), int(k), float(m), float(t)) for n, i, k, m, t in g["parts"]),
                            float(g["memory_bytes"]), float(g["latency_s"]), int(g["workers"]))
                for g in data["groups"])
            partition = PartitionPlan(groups, int(data["pod_memory_bytes"]), float(data["latency_budget_s"]))
            return cls(partition, tuple(int(g["shards"]) for g in data["groups"]),
                       {str(k): float(v) for k, v in data["weights"].items()},
                       {str(k): SourceSpec(int(v["memory_bytes"]), float(v["batch_s"]))
                        for k, v in data["sources"].items()})
        except (KeyError, TypeError, ValueError) as e:
            raise FleetError(f"{what}: a damaged fleet plan ({type(e).__name__}: {e}); restore it or run the "
                             "fleet under another prefix") from e


def plan_shards(
    sources: Mapping[str, SourceSpec], weights: Mapping[str, float] | None = None, *, pod_memory_bytes: int,
    latency_budget_s: float, overhead_s: float = 0.0, spread: int = 2,
) -> ShardPlan:
    """Partition ``sources`` (seed 004 §5.1) and give group ``j`` ``w_j * spread`` shards; deterministic."""
    if isinstance(spread, bool) or not isinstance(spread, int) or spread < 1:
        raise ValueError(f"spread={spread!r} must be an int >= 1 (shards per planned worker)")
    if weights is not None:
        unknown = sorted(set(weights) - set(sources))
        if unknown:
            raise ValueError(f"weights name {unknown}, which are not sources {sorted(sources)}")
    partition = partition_sources(sources, weights, pod_memory_bytes=pod_memory_bytes,
                                  latency_budget_s=latency_budget_s, overhead_s=overhead_s)
    chosen = {k: 1.0 for k in sources} if weights is None else {k: float(weights.get(k, 0.0)) for k in sources}
    return ShardPlan(partition, tuple(g.workers * spread for g in partition.groups), chosen, dict(sources))


def shares(plan: ShardPlan, weights: Mapping[str, float], costs: Mapping[str, float] | None = None) -> list[float]:
    """Each group's share of the work under ``weights``: sum over its parts of weight x cost / parts, normalised.

    ``costs``: seconds per batch of each source (measured); the plan's own where none is given.
    """
    loads: list[float] = []
    for g in plan.groups:
        load = 0.0
        for p in g.parts:
            cost = (costs or {}).get(p.name, plan.sources[p.name].batch_s if p.name in plan.sources else 0.0)
            load += max(weights.get(p.name, 0.0), 0.0) * max(cost, 0.0) / p.parts
        loads.append(load)
    total = sum(loads)
    return [x / total for x in loads] if total > 0 else [1.0 / len(loads)] * len(loads)


def check_plan(plan: ShardPlan, *, num_shards: int, where: str) -> None:
    """Refuse a fleet whose shard count is not its plan's."""
    if plan.num_shards != num_shards:
        raise FleetError(f"{where}: the fleet has num_shards={num_shards} but its source plan has "
                         f"{plan.num_shards} shards (pass num_shards=plan.num_shards)")


def group_sizes(groups: Sequence[int | None], count: int) -> list[int]:
    """Actors per group (``None`` labels, undedicated actors, not counted)."""
    out = [0] * count
    for g in groups:
        if g is not None:
            out[g] += 1
    return out
