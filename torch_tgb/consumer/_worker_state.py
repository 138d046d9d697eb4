"""The workers' reader states inside a multi-worker StatefulDataLoader state, found by path.

Each worker's dataset state rides in the loader's state under its worker
snapshot (``torch_tgb.cursor.WORKER_SNAPSHOTS_PATH``); inside a worker it also
carries the worker's read statistics (``"stats"``), which ``tgb.DataLoader``
collects for :meth:`~torch_tgb.consumer.loader.DataLoader.stats` and leaves
out of the state it hands to checkpoints.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from torch_tgb.cursor import DATASET_STATE_KEY, WORKER_SNAPSHOTS_PATH
from torch_tgb.consumer.dataset import STATS_KEY

__all__ = ["without_worker_stats", "worker_readers"]


def worker_readers(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The workers' dataset states inside a multi-worker StatefulDataLoader state (by path)."""
    snapshots: Any = state
    for key in WORKER_SNAPSHOTS_PATH:
        snapshots = snapshots.get(key, {}) if isinstance(snapshots, Mapping) else {}
    return [w[DATASET_STATE_KEY] for w in snapshots.values() if DATASET_STATE_KEY in w]


def without_worker_stats(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the workers' ``"stats"`` left out (a copy along the paths that change): not checkpoint data."""
    readers = worker_readers(state)
    if not any(STATS_KEY in r for r in readers):
        return state
    out = copy.copy(state)
    node = out
    for key in WORKER_SNAPSHOTS_PATH:
        node[key] = copy.copy(node[key])
        node = node[key]
    for name, worker in node.items():
        worker = node[name] = copy.copy(worker)
        worker[DATASET_STATE_KEY] = {k: v for k, v in worker[DATASET_STATE_KEY].items() if k != STATS_KEY}
    return out
