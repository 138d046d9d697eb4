"""Object names of the manifest log (see docs/protocol.md).

Numbers are zero-padded to 20 digits so that a lexicographic LIST is numeric order.
"""

from __future__ import annotations

__all__ = [
    "DATASET_KEY",
    "GC_BOUNDARY_KEY",
    "LOG_PREFIX",
    "SNAPSHOT_HINT_KEY",
    "SNAPSHOT_PREFIX",
    "number_of",
    "snapshot_key",
    "version_key",
]

DATASET_KEY = "_tgb/dataset.json"
LOG_PREFIX = "_tgb/log/"
SNAPSHOT_PREFIX = "_tgb/snapshots/"
SNAPSHOT_HINT_KEY = "_tgb/snapshot_hint.json"
GC_BOUNDARY_KEY = "_tgb/gc_boundary.json"


def version_key(number: int) -> str:
    return f"{LOG_PREFIX}{number:020d}.json"


def snapshot_key(number: int) -> str:
    return f"{SNAPSHOT_PREFIX}{number:020d}.json"


def number_of(key: str, prefix: str) -> int | None:
    name = key[len(prefix) :]
    if not (name.endswith(".json") and len(name) == 25 and name[:20].isdigit()):
        return None  # temporary files of a backend, or foreign objects: not ours
    return int(name[:20])
