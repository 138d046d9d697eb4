"""Source auto-partitioning (OVERLORD, seed 004 §5.1): heavy sources split, light ones grouped, workers sized.

Given each source's memory ``M_k`` (file access states, buffers) and its
preprocessing latency ``P_k`` (seconds per batch at its weight: measured cost
per document x documents per batch x weight), a pod's memory ``M_pod`` and a
latency budget ``O_up`` (the trainer's step time), :func:`partition_sources`
follows the paper's three steps:

1. **Source partition.** A source with ``M_k > M_pod`` is cut into
   ``ceil(M_k / M_pod)`` shards (data parallel: each shard a source of its
   own, ``M_k / n`` memory and ``P_k / n`` latency).
2. **Source grouping.** All sources and shards, in ascending order of latency,
   are packed greedily into groups whose memory stays within ``M_pod``
   (similar costs together).
3. **Group acceleration.** A group of latency ``O_j = sum P + overhead`` gets
   ``w_j = ceil(O_j / O_up)`` workers, so each keeps up with the budget.

Pure (``tests/integrations/test_fleet_partition.py``). An autoscaling fleet
shows the plan in its report (``FleetReport.partition``) from the costs its
shards measure; ``_shard_plan.py`` applies one: shards bound to the groups,
actors dedicated to them. A source whose weight doubles doubles its latency
and its group's workers: the mixture-driven part of the fleet's demand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["PartitionPlan", "SourceGroup", "SourcePart", "SourceSpec", "partition_sources"]


@dataclass(frozen=True)
class SourceSpec:
    """A source as the partitioner sees it: ``memory_bytes`` held open, ``batch_s`` seconds per batch at weight 1."""

    memory_bytes: int = 0
    batch_s: float = 0.0


@dataclass(frozen=True)
class SourcePart:
    """Shard ``part`` of ``parts`` of source ``name``, with its share of memory and latency."""

    name: str
    part: int
    parts: int
    memory_bytes: float
    latency_s: float


@dataclass(frozen=True)
class SourceGroup:
    """Sources (or shards of one) read together, and the workers that keep them within the budget."""

    parts: tuple[SourcePart, ...]
    memory_bytes: float
    latency_s: float
    workers: int

    def describe(self) -> str:
        names = ", ".join(p.name if p.parts == 1 else f"{p.name}[{p.part}/{p.parts}]" for p in self.parts)
        return f"{names}: {self.memory_bytes / 2**20:.0f} MiB, {self.latency_s * 1e3:.1f} ms/batch, {self.workers} w"


@dataclass(frozen=True)
class PartitionPlan:
    """The groups, the workers they need in all, and the inputs it was made from."""

    groups: tuple[SourceGroup, ...]
    pod_memory_bytes: int
    latency_budget_s: float

    @property
    def workers(self) -> int:
        return sum(g.workers for g in self.groups)

    def summary(self) -> str:
        lines = [f"{len(self.groups)} source groups, {self.workers} workers (pod {self.pod_memory_bytes / 2**30:.1f} "
                 f"GiB, budget {self.latency_budget_s * 1e3:.1f} ms/batch)"]
        lines += [f"  {g.describe()}" for g in self.groups]
        return "\n".join(lines)


def partition_sources(
    sources: Mapping[str, SourceSpec], weights: Mapping[str, float] | None = None, *, pod_memory_bytes: int,
    latency_budget_s: float, overhead_s: float = 0.0,
) -> PartitionPlan:
    """The three-step plan of the module docstring; ``weights`` scale each source's latency (default 1)."""
    if pod_memory_bytes < 1 or not latency_budget_s > 0 or overhead_s < 0:
        raise ValueError(f"pod_memory_bytes={pod_memory_bytes} must be >= 1, latency_budget_s={latency_budget_s} "
                         f"> 0 and overhead_s={overhead_s} >= 0")
    parts: list[SourcePart] = []
    for name in sorted(sources):
        spec = sources[name]
        if spec.memory_bytes < 0 or not math.isfinite(spec.batch_s) or spec.batch_s < 0:
            raise ValueError(f"source {name!r}: memory_bytes and batch_s must be finite and >= 0, got {spec}")
        weight = 1.0 if weights is None else float(weights.get(name, 0.0))
        n = max(1, math.ceil(spec.memory_bytes / pod_memory_bytes))  # 1. heavy sources cut to fit a pod
        for i in range(n):
            parts.append(SourcePart(name, i, n, spec.memory_bytes / n, spec.batch_s * weight / n))
    parts.sort(key=lambda p: (p.latency_s, p.name, p.part))  # 2. similar latencies together
    groups: list[list[SourcePart]] = []
    for part in parts:
        if groups and sum(p.memory_bytes for p in groups[-1]) + part.memory_bytes <= pod_memory_bytes:
            groups[-1].append(part)
        else:
            groups.append([part])
    out = []
    for members in groups:  # 3. workers: each group within the latency budget
        latency = sum(p.latency_s for p in members) + overhead_s
        out.append(SourceGroup(tuple(members), sum(p.memory_bytes for p in members), latency,
                               max(1, math.ceil(latency / latency_budget_s - 1e-9))))
    return PartitionPlan(tuple(out), pod_memory_bytes, latency_budget_s)
