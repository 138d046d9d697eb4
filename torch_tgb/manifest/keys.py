"""Object names of the manifest log (see docs/protocol.md, *Objects* and *Manifest keys spread over prefixes*).

Numbers are zero-padded to 20 digits. Where the numbered objects (versions,
snapshots, snapshot parts) physically live is the namespace's
:class:`KeyLayout`, recorded in ``dataset.json`` at creation: :data:`FLAT`
(``_tgb/log/<v>.json``: namespaces created before spreading, and logs an
older torch_tgb wrote before any ``dataset.json``) or spread over K prefixes (``_tgb/log/<p>/<v>.json``, the
default for new namespaces), so that S3 can partition the manifest's load.
The module-level ``version_key``/``snapshot_key``/``snapshot_part_key`` are
the flat layout's names.
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

__all__ = [
    "DATASET_KEY",
    "FLAT",
    "KeyLayout",
    "NEW_NAMESPACE_KEYS",
    "SPREAD_PREFIXES",
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


#: prefixes the numbered objects of a new namespace spread over (docs/protocol.md argues 16)
SPREAD_PREFIXES = 16
#: the most prefixes a namespace may record (a bound on what a reader accepts from dataset.json)
MAX_PREFIXES = 256
#: the ``scheme`` of a spread layout in dataset.json's ``keys``
SPREAD_SCHEME = "last-digit/sha256"


class KeyLayout(NamedTuple):
    """Where a namespace's versions, snapshots and snapshot parts live (see the module docstring).

    ``prefixes == 1`` is the flat layout. Spread over K prefixes: version
    ``n`` lives under ``n mod K`` (its last base-K digit, in hex), so any K
    consecutive versions take every prefix once (a fleet reading in order
    spreads evenly, not by chance); snapshot ``n`` under the first 4 bytes
    of the SHA-256 of its 20-digit number (big-endian) mod K, so snapshots
    at every multiple of ``snapshot_every`` do not share one prefix (``n mod
    K`` would put every one at a multiple of K under prefix 0); the parts of
    a snapshot follow its prefix round-robin (a window of parts read at once
    takes distinct prefixes).
    """

    prefixes: int = 1

    @property
    def spread(self) -> bool:
        return self.prefixes > 1

    def _prefix(self, value: int) -> str:
        k = self.prefixes
        return f"{value % k:0{len(f'{k - 1:x}')}x}/" if k > 1 else ""

    def version_prefix(self, number: int) -> str:
        """The spread prefix (with its ``/``) of version ``number``; ``""`` when flat."""
        return self._prefix(number)

    def snapshot_prefix(self, number: int, part: int = -1) -> str:
        """The spread prefix of snapshot ``number`` (of its part ``part``); ``""`` when flat."""
        if self.prefixes == 1:
            return ""
        digest = hashlib.sha256(f"{number:020d}".encode()).digest()
        return self._prefix(int.from_bytes(digest[:4], "big") + part + 1)

    def version_key(self, number: int) -> str:
        return f"{LOG_PREFIX}{self.version_prefix(number)}{number:020d}.json"

    def snapshot_key(self, number: int) -> str:
        return f"{SNAPSHOT_PREFIX}{self.snapshot_prefix(number)}{number:020d}.json"

    def snapshot_part_key(self, number: int, part: int) -> str:
        """Part ``part`` of a snapshot too large for one object (flat: it sorts right after the snapshot's key)."""
        return f"{SNAPSHOT_PREFIX}{self.snapshot_prefix(number, part)}{number:020d}.part{part:05d}.json"

    def version_of(self, key: str) -> int | None:
        """The version a listed ``_tgb/log/`` key holds; ``None`` for anything else (a backend's temp file)."""
        name = self._name(key, LOG_PREFIX)
        number = None if name is None else number_of(name, "")
        return number if number is not None and key == self.version_key(number) else None

    def snapshot_of(self, key: str) -> tuple[int, int | None] | None:
        """``(version, part)`` of a listed ``_tgb/snapshots/`` key (``part`` None: the snapshot's own object)."""
        name = self._name(key, SNAPSHOT_PREFIX)
        match = None if name is None else _SNAPSHOT_NAME.fullmatch(name)
        if match is None:
            return None
        number, part = int(match.group(1)), None if match.group(2) is None else int(match.group(2))
        ours = self.snapshot_key(number) if part is None else self.snapshot_part_key(number, part)
        return (number, part) if key == ours else None

    def _name(self, key: str, prefix: str) -> str | None:
        """``key`` below ``prefix`` and its spread prefix (not checked here: the caller compares the whole key)."""
        if not key.startswith(prefix):
            return None
        name = key[len(prefix) :]
        return name.rsplit("/", 1)[-1] if self.spread else name

    def to_json(self) -> dict[str, object] | None:
        """dataset.json's ``keys`` field (``None``: flat, no field, as before spreading)."""
        return {"scheme": SPREAD_SCHEME, "prefixes": self.prefixes} if self.spread else None

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> KeyLayout:
        """The layout of dataset.json's ``keys`` field; ``ValueError`` naming ``what`` for one this version cannot read."""
        if obj is None:
            return FLAT
        if not isinstance(obj, dict) or set(obj) != {"scheme", "prefixes"}:
            raise ValueError(f"{what}: keys {obj!r} is not {{'scheme': ..., 'prefixes': ...}}")
        prefixes = obj["prefixes"]
        if obj["scheme"] != SPREAD_SCHEME:
            raise ValueError(f"{what}: key scheme {obj['scheme']!r} is not {SPREAD_SCHEME!r} (written by a newer "
                             "torch_tgb? upgrade torch_tgb to read it)")
        if type(prefixes) is not int or not 2 <= prefixes <= MAX_PREFIXES:
            raise ValueError(f"{what}: keys spread over {prefixes!r} prefixes, not an integer in 2..{MAX_PREFIXES}")
        return cls(prefixes)


#: the layout of namespaces created before spreading (dataset.json without ``keys``)
FLAT = KeyLayout(1)
#: the layout new namespaces get (tests set it to FLAT to run the same test on the old layout)
NEW_NAMESPACE_KEYS = KeyLayout(SPREAD_PREFIXES)

_SNAPSHOT_NAME = re.compile(r"([0-9]{20})(?:\.part([0-9]{5}))?\.json")


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
