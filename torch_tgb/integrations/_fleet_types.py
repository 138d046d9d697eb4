"""The settings and the results of a producer fleet (pure data, no Ray)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch_tgb.integrations._autoscale import AutoscalePolicy

if TYPE_CHECKING:
    from torch_tgb.integrations._partition import PartitionPlan
    from torch_tgb.integrations._scaler import AutoscaleEvent, TimelinePoint
    from torch_tgb.integrations._shard_plan import ShardPlan

__all__ = ["FleetConfig", "FleetReport", "ShardOutcome", "ShardStats"]


@dataclass(frozen=True)
class FleetConfig:
    """Tuning of a :class:`~torch_tgb.integrations.ray.Fleet` (the defaults suit most fleets).

    ``poll_interval_s``: how often the driver collects results and workers'
    progress. ``log_interval_s``: a progress log line that often when no
    progress bar is drawn. ``max_shard_attempts``: a shard whose worker died
    this many times fails the fleet (a crash loop, e.g. out of memory).
    ``stall_timeout_s``: a running shard that neither pulled a batch nor
    attempted a commit for this long is given to a fresh worker; the stalled
    one is left to come back, when its commit is fenced by the epoch bump of
    its replacement (``None``: never; keep it far above the longest pause a
    healthy producer makes, ``max_lag`` pauses excluded).
    ``drain_timeout_s``: at the end, how long abandoned (stalled) attempts
    get to report back before their workers are killed.
    ``connect_timeout_s``: the check that a Ray address is reachable.
    ``metrics_port``: serve per-producer gauges for Prometheus on
    127.0.0.1:PORT while running (0: a free port; needs prometheus_client).

    **Autoscaling** (``integrations/_autoscale.py``, docs/operations.md):
    ``autoscale=(min, max)`` (or an ``AutoscalePolicy`` with its thresholds)
    lets the driver grow and shrink the pool every ``autoscale_interval_s``
    from the trainer's stall and step (``ControlChannel.report_trainer``,
    ignored once older than ``trainer_stale_s``), the producers' lead,
    ``max_lag`` pauses and the mixture ahead; ``num_producers`` is where it
    starts. ``sources``: each source's memory in bytes (file access states)
    and ``pod_memory_bytes`` a worker's, for the source partition in the report.

    **Planned by source** (``integrations/_shard_plan.py``): ``plan`` (from
    :func:`~torch_tgb.integrations.ray.source_plan`) binds each shard to one
    group of sources; every actor is dedicated to a group and claims its
    shards first, the pool starts with each group's planned workers, and an
    autoscaled pool gives new actors to the groups whose weight or cost rises
    first. The fleet records the plan in the namespace and refuses another.
    """

    poll_interval_s: float = 0.5
    log_interval_s: float = 30.0
    max_shard_attempts: int = 10
    stall_timeout_s: float | None = None
    drain_timeout_s: float = 30.0
    connect_timeout_s: float = 5.0
    metrics_port: int | None = None
    autoscale: tuple[int, int] | AutoscalePolicy | None = None
    autoscale_interval_s: float = 2.0
    trainer_stale_s: float = 30.0
    sources: Mapping[str, int] | None = None
    pod_memory_bytes: int = 8 << 30
    plan: ShardPlan | None = None

    @property
    def policy(self) -> AutoscalePolicy | None:
        """The autoscaling policy (None: the pool keeps the size it is given)."""
        if self.autoscale is None or isinstance(self.autoscale, AutoscalePolicy):
            return self.autoscale
        low, high = self.autoscale
        return AutoscalePolicy(low, high)

    def __post_init__(self) -> None:
        if self.autoscale is not None and not isinstance(self.autoscale, AutoscalePolicy):
            try:
                low, high = self.autoscale
            except (TypeError, ValueError):
                raise ValueError(f"autoscale={self.autoscale!r} must be (min, max) or an AutoscalePolicy") from None
            AutoscalePolicy(low, high)  # raises on bad bounds
        if self.autoscale_interval_s <= 0 or self.trainer_stale_s <= 0 or self.pod_memory_bytes < 1:
            raise ValueError("autoscale_interval_s, trainer_stale_s and pod_memory_bytes must be > 0")
        if self.max_shard_attempts < 1:
            raise ValueError(f"max_shard_attempts={self.max_shard_attempts} must be >= 1")
        for name in ("poll_interval_s", "log_interval_s", "drain_timeout_s", "connect_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be > 0")
        if self.stall_timeout_s is not None and self.stall_timeout_s <= 0:
            raise ValueError(f"stall_timeout_s={self.stall_timeout_s} must be > 0 or None")


@dataclass(frozen=True)
class ShardOutcome:
    """What a worker reports when one attempt at a shard ends (``status``: ``done`` | ``fenced`` | ``failed``)."""

    shard: int
    producer_id: str
    status: str
    appended: int = 0
    bytes: int = 0
    commit_attempts: int = 0
    commit_successes: int = 0
    elapsed_s: float = 0.0
    committed_writes: int = 0
    visibility_lag_sum_s: float = 0.0
    visibility_lag_max_s: float = 0.0
    error: str = ""
    error_type: str = ""


@dataclass(frozen=True)
class ShardStats:
    """One shard's producer as the driver sees it (live in :meth:`Fleet.stats`, final in the report).

    ``committed``: offsets this producer id has committed in the namespace
    (all runs); ``appended``/``bytes``: TGBs and bytes its workers wrote in
    this run (including work a dead or fenced incarnation wrote and a later one
    redid); ``mb_per_s`` over the shard's running time; ``commit_success_rate``
    of its commit attempts; ``lag``: TGBs written by the running incarnation
    and not yet committed; ``visibility_lag_s``: mean seconds from a TGB's
    write to the commit that made it visible (``_max_s``: the largest).
    """

    shard: int
    producer_id: str
    state: str
    attempts: int
    committed: int
    appended: int
    bytes: int
    running_s: float
    commit_attempts: int
    commit_successes: int
    lag: int
    deaths: int
    fenced: int
    worker: str = ""
    visibility_lag_s: float = 0.0
    visibility_lag_max_s: float = 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.running_s if self.running_s > 0 else 0.0

    @property
    def commit_success_rate(self) -> float:
        return self.commit_successes / self.commit_attempts if self.commit_attempts else 1.0


@dataclass(frozen=True)
class FleetReport:
    """The result of a fleet run: per-producer stats and the fleet's totals.

    ``steps``: TGBs the namespace gained during the run; ``worker_deaths``:
    attempts lost to a dead worker (re-run elsewhere); ``fenced``: attempts
    that came back after their replacement started and were fenced;
    ``reassigned``: shards given to another worker because theirs stalled or
    was removed by :meth:`Fleet.scale`.
    """

    ns: str
    num_shards: int
    producers: tuple[ShardStats, ...]
    steps: int
    elapsed_s: float
    workers: int
    worker_deaths: int
    fenced: int
    reassigned: int
    sealed: bool
    #: autoscaling: every change of the pool's size, every round's signals, the source partition (seed 004 §5.1)
    autoscale: tuple[AutoscaleEvent, ...] = ()
    timeline: tuple[TimelinePoint, ...] = ()
    partition: PartitionPlan | None = None
    #: a fleet planned by source: its recorded plan (groups, their sources and shards)
    plan: ShardPlan | None = None

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.producers)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def commit_success_rate(self) -> float:
        attempts = sum(p.commit_attempts for p in self.producers)
        return sum(p.commit_successes for p in self.producers) / attempts if attempts else 1.0

    @property
    def visibility_lag_s(self) -> float:
        """Mean write -> visible seconds over every committed TGB of the run."""
        weights = [(p.visibility_lag_s, p.commit_successes) for p in self.producers if p.visibility_lag_s > 0]
        return sum(v * n for v, n in weights) / sum(n for _, n in weights) if weights else 0.0

    def summary(self) -> str:
        """One line for logs and the command line."""
        return (
            f"{self.ns}: {self.steps} steps from {self.num_shards} shards on {self.workers} workers in "
            f"{self.elapsed_s:.1f} s ({self.mb_per_s:.1f} MB/s, commit success {self.commit_success_rate:.0%}, "
            f"{self.worker_deaths} worker deaths, {self.fenced} fenced, {self.reassigned} reassigned"
            f"{f', {len(self.autoscale)} autoscale changes' if self.autoscale else ''}"
            f"{', sealed' if self.sealed else ''})"
        )

    def scaling(self) -> str:
        """An autoscaled fleet's story: each change of the pool and why, then its source plan or partition ('' if none)."""
        lines = [f"{e.t:8.1f} s  {e.before} -> {e.after} actors: {e.reason}"
                 + (f" (new actors for {', '.join(e.groups)})" if e.groups else "") for e in self.autoscale]
        if self.plan is not None:
            lines.append(self.plan.summary())
        elif self.partition is not None:
            lines.append(self.partition.summary())
        return "\n".join(lines)
