"""Producer fleets on Ray: elastic, fault-tolerant preprocessing that feeds a namespace exactly once.

``produce_on_ray(ns, make_pipeline, num_producers=N, layout=...)`` cuts the
input into shards (``num_shards``, fixed for a namespace); shard ``i`` is the
pipeline ``make_pipeline(i, num_shards)`` run through :func:`torch_tgb.produce`
as producer ``<prefix>-shard<i>-of<n>`` by whichever of the N Ray actors is
free. Because a shard's id and its committed pipeline state do not depend on
which worker runs it or how many workers there are:

- a killed actor's shard resumes on a restarted or another actor at its last
  commit; a stalled one that comes back is fenced by the producer epoch;
- ``Fleet.scale(n)`` grows or shrinks the pool while it runs, and a rerun
  with another ``num_producers`` continues where the last run stopped;
- ``FleetConfig(autoscale=(min, max))`` lets the fleet size itself from the
  trainer's stall, the producers' lead, ``max_lag`` pauses and the mixture
  ahead (:class:`AutoscalePolicy`; ``FleetReport.autoscale``/``timeline``/``partition``);
- ``FleetConfig(plan=source_plan(ns, sources, ...))`` binds shards to groups
  of sources (heavy ones split, light ones grouped, seed 004 §5.1) and
  actors to groups: a source whose weight or cost rises gets the new actors
  first (the plan is recorded in the namespace: every run uses the same).

See docs/operations.md, "Producer fleets on Ray". Needs the ``ray`` extra.
"""

from __future__ import annotations

try:
    import ray as _ray  # noqa: F401 - fail here, with the extra to install, rather than deep inside a fleet
except ImportError as e:  # pragma: no cover - exercised where ray is not installed
    raise ImportError(
        "torch_tgb.integrations.ray needs Ray: pip install 'torch-tgb[ray]'"
    ) from e

from collections.abc import Callable, Mapping
from typing import Any

from typing_extensions import Required, Unpack

from torch_tgb.integrations._autoscale import AutoscalePolicy, Decision, FleetSignals
from torch_tgb.integrations._fleet_types import FleetConfig, FleetReport, ShardOutcome, ShardStats
from torch_tgb.integrations._ray_fleet import Fleet
from torch_tgb.integrations._partition import PartitionPlan, SourceSpec, partition_sources
from torch_tgb.integrations._plan_record import load_plan, source_plan
from torch_tgb.integrations._scaler import AutoscaleEvent, TimelinePoint
from torch_tgb.integrations._shard_plan import ShardPlan, ShardSources, SourceSlice, plan_shards
from torch_tgb.integrations._shards import parse_shard_producer_id, shard_producer_id
from torch_tgb.layout import Layout
from torch_tgb.producer import ProduceOptions, ProducerConfig, ProduceSettings

__all__ = [
    "AutoscaleEvent",
    "AutoscalePolicy",
    "Decision",
    "Fleet",
    "FleetConfig",
    "FleetReport",
    "FleetSettings",
    "FleetSignals",
    "PartitionPlan",
    "ShardOutcome",
    "ShardPlan",
    "ShardSources",
    "ShardStats",
    "SourceSlice",
    "SourceSpec",
    "TimelinePoint",
    "load_plan",
    "parse_shard_producer_id",
    "partition_sources",
    "plan_shards",
    "produce_on_ray",
    "shard_producer_id",
    "source_plan",
]


class FleetSettings(ProduceSettings, total=False):
    """:class:`Fleet`'s keyword arguments (``num_producers`` and ``layout`` required), typed for ``produce_on_ray``."""

    num_producers: Required[int]
    layout: Required[Layout]
    num_shards: int | None
    storage_options: Mapping[str, Any] | None
    options: ProduceOptions | None
    actor_options: Mapping[str, Any] | None
    max_restarts: int
    address: str | None
    prefix: str
    fleet: FleetConfig | None
    producer_config: ProducerConfig | None
    max_steps_per_shard: int | None


def produce_on_ray(ns: str, make_pipeline: Callable[[int, int], Any], **options: Unpack[FleetSettings]) -> FleetReport:
    """Produce every shard of ``make_pipeline`` into ``ns`` on a fleet of Ray actors; block until done.

    ``options`` are :class:`Fleet`'s keyword arguments (``num_producers`` and
    ``layout`` required, the :class:`~torch_tgb.producer.ProduceOptions` fields
    among them); this is ``Fleet(ns, make_pipeline, **options).run()``.
    Raises :class:`~torch_tgb.errors.FleetError` naming the shard when a
    pipeline fails (its factory raising included): what was committed stays
    committed, whole TGBs only, and a rerun resumes.
    """
    return Fleet(ns, make_pipeline, **options).run()
