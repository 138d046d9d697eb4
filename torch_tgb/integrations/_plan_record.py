"""A fleet's source plan, recorded in its namespace so every run of the job uses the same one.

``_tgb/control/fleet/<prefix>.json`` holds the :class:`ShardPlan` as JSON,
written once with a conditional create. The plan decides what each shard
(producer id) reads, so a restart, a rerun with another pool size or a
second driver must use the recorded plan, never a fresh one from newer
measurements: that would re-cut the sources under the same producer ids and
produce documents twice or never. :func:`source_plan` returns the recorded
plan when there is one (and says so when the inputs given would plan
differently), else plans (deterministically) and records.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from torch_tgb.errors import FleetError, ObjectNotFound
from torch_tgb.integrations._partition import SourceSpec
from torch_tgb.integrations._shard_plan import ShardPlan, plan_shards
from torch_tgb.manifest._json import dump_json, load_json
from torch_tgb.storage import ObjectStore, open_store

__all__ = ["PLAN_PREFIX", "load_plan", "plan_key", "read_plans", "record_plan", "source_plan"]

log = logging.getLogger("torch_tgb.integrations.ray")

PLAN_PREFIX = "_tgb/control/fleet/"


def plan_key(prefix: str) -> str:
    return f"{PLAN_PREFIX}{prefix}.json"


def load_plan(store: ObjectStore, prefix: str) -> ShardPlan | None:
    """The plan recorded for the job ``prefix`` (None: none yet)."""
    key = plan_key(prefix)
    try:
        data = store.get(key)
    except ObjectNotFound:
        return None
    return ShardPlan.from_json(load_json(bytes(data), what=f"{store.url}/{key}"), what=f"{store.url}/{key}")


def record_plan(store: ObjectStore, prefix: str, plan: ShardPlan) -> ShardPlan:
    """Record ``plan`` for ``prefix`` unless one is; the recorded one must be ``plan`` (else :class:`FleetError`)."""
    if store.put_if_absent(plan_key(prefix), dump_json(plan.to_json())):
        return plan
    recorded = load_plan(store, prefix)
    if recorded is None or recorded.to_json() != plan.to_json():  # a deleted key between the two calls: refuse too
        raise FleetError(
            f"{store.url}: job {prefix!r} runs under the source plan recorded at {plan_key(prefix)}, not the one "
            "given: a shard's sources are fixed for a namespace (pass the recorded plan, from "
            "source_plan(ns, ...) or load_plan, or use another prefix)"
        )
    return recorded


def read_plans(store: ObjectStore) -> dict[str, ShardPlan]:
    """Every recorded plan by job prefix (``tgb inspect``)."""
    out = {}
    for key in sorted(store.list(PLAN_PREFIX)):
        if key.endswith(".json"):
            prefix = key[len(PLAN_PREFIX) : -len(".json")]
            plan = load_plan(store, prefix)
            if plan is not None:
                out[prefix] = plan
    return out


def source_plan(
    ns: str, sources: Mapping[str, SourceSpec], weights: Mapping[str, float] | None = None, *,
    pod_memory_bytes: int, latency_budget_s: float, overhead_s: float = 0.0, spread: int = 2,
    prefix: str = "fleet", storage_options: Mapping[str, Any] | None = None,
) -> ShardPlan:
    """The job's source plan: the one recorded in ``ns`` for ``prefix``, else a new one, recorded.

    Plan a fleet with it before making the pipeline factory:
    ``num_shards=plan.num_shards``, ``FleetConfig(plan=plan)``, and
    ``plan.shard(i)`` inside ``make_pipeline(i, n)`` says what shard ``i`` reads.
    """
    fresh = plan_shards(sources, weights, pod_memory_bytes=pod_memory_bytes, latency_budget_s=latency_budget_s,
                        overhead_s=overhead_s, spread=spread)
    store = open_store(ns, storage_options)
    try:
        recorded = load_plan(store, prefix)
        if recorded is None:
            if store.put_if_absent(plan_key(prefix), dump_json(fresh.to_json())):
                return fresh
            recorded = load_plan(store, prefix)  # another driver recorded first: theirs
            assert recorded is not None  # plans are never deleted
        if recorded.to_json() != fresh.to_json():
            log.warning("%s: job %r keeps its recorded source plan (%d shards); the inputs given would plan "
                        "differently, which a namespace cannot take (its shards' sources are fixed)", store.url,
                        prefix, recorded.num_shards)
        return recorded
    finally:
        store.close()
