"""Object names of the manifest log (see docs/protocol.md).

Numbers are zero-padded to 20 digits so that a lexicographic LIST is numeric order.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "DATASET_KEY",
    "GC_BOUNDARY_KEY",
    "LOG_PREFIX",
    "ObjectName",
    "SNAPSHOT_HINT_KEY",
    "SNAPSHOT_PREFIX",
    "number_of",
    "object_name",
    "parse_object_name",
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


class ObjectName(NamedTuple):
    """What a TGB object's key says about who wrote it: ``data/<producer>/e<epoch>-o<offset>-<rand>.tgb``."""

    producer: str
    epoch: int
    offset: int


_OBJECT_NAME = re.compile(r"data/([^/]+)/e([0-9]{6,})-o([0-9]{12,})-[0-9a-f]+\.tgb")


def object_name(producer_id: str, epoch: int, offset: int, rand: str) -> str:
    """The key of the object a producer incarnation writes for ``offset`` (``rand``: unique per write)."""
    return f"data/{producer_id}/e{epoch:06d}-o{offset:012d}-{rand}.tgb"


def parse_object_name(key: str) -> ObjectName | None:
    """The producer, epoch and offset a key names; ``None`` for a key no producer writes.

    The Reclaimer decides from these fields (and the manifest) whether an
    uncommitted object can still be committed: see docs/protocol.md,
    *Reclaiming uncommitted objects*.
    """
    match = _OBJECT_NAME.fullmatch(key)
    if match is None:
        return None
    return ObjectName(match.group(1), int(match.group(2)), int(match.group(3)))
