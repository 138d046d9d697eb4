"""Object names of the manifest log (see docs/protocol.md).

Numbers are zero-padded to 20 digits so that a lexicographic LIST is numeric order.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "DATASET_KEY",
    "GC_BOUNDARY_KEY",
    "GC_BOUNDARY_PREFIX",
    "LOG_PREFIX",
    "ObjectName",
    "boundary_key",
    "boundary_of",
    "SNAPSHOT_HINT_KEY",
    "SNAPSHOT_PREFIX",
    "number_of",
    "object_name",
    "parse_object_name",
    "snapshot_key",
    "snapshot_part_key",
    "version_key",
]

DATASET_KEY = "_tgb/dataset.json"
LOG_PREFIX = "_tgb/log/"
SNAPSHOT_PREFIX = "_tgb/snapshots/"
SNAPSHOT_HINT_KEY = "_tgb/snapshot_hint.json"
GC_BOUNDARY_PREFIX = "_tgb/gc_boundary/"
GC_BOUNDARY_KEY = "_tgb/gc_boundary.json"  # before boundary generations: read only when none exists


def version_key(number: int) -> str:
    return f"{LOG_PREFIX}{number:020d}.json"


def snapshot_key(number: int) -> str:
    return f"{SNAPSHOT_PREFIX}{number:020d}.json"


def snapshot_part_key(number: int, part: int) -> str:
    """Part ``part`` of a snapshot too large for one object; it sorts right after the snapshot's own key."""
    return f"{SNAPSHOT_PREFIX}{number:020d}.part{part:05d}.json"


def boundary_key(version: int, step: int) -> str:
    """The immutable object of one GC-boundary generation: its name is its value (see docs/protocol.md)."""
    return f"{GC_BOUNDARY_PREFIX}{version:020d}-{step:020d}.json"


_BOUNDARY_NAME = re.compile(r"([0-9]{20})-([0-9]{20})\.json")


def boundary_of(key: str) -> tuple[int, int] | None:
    """``(version, step)`` of a boundary generation's key; ``None`` for anything else (a backend's temp file)."""
    match = _BOUNDARY_NAME.fullmatch(key[len(GC_BOUNDARY_PREFIX) :]) if key.startswith(GC_BOUNDARY_PREFIX) else None
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


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


EPOCH_PREFIX = "_tgb/epochs/"


def epoch_key(producer_id: str, epoch: int) -> str:
    """The registration object of ``producer_id``'s incarnation ``epoch``: created once, never rewritten
    (docs/protocol.md, *Registering*)."""
    return f"{EPOCH_PREFIX}{producer_id}/{epoch:010d}.json"
