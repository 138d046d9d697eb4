"""Replacement entries: the manifest's way to supersede a step's TGB without moving any step.

An excision (``lineage.excise``) rewrites TGBs as new objects and commits one
*replacement version*: a format-2 version that appends no entry, changes no
producer, and names a new :class:`ReplacedRef`. Every later version carries
that reference unchanged (the committer copies it from its view), so the
newest version a reader reads names every replacement in effect, as it
names every producer through its table (docs/protocol.md, *Replacement
entries*).

A :class:`ReplacedRef` names, per bucket of :data:`BUCKET_STEPS` steps, an
immutable object ``_tgb/replaced/<b:06d>/<v:020d>-<tok8>.json`` holding the
bucket's replacements (:class:`ReplacedBucket`): for each replaced step the
entry in effect and the version that set it, and the objects it superseded
(with when and up to which step they served, what the Reclaimer needs). A
replacement version rewrites only the buckets it touches (copy on write);
the others keep their references.

A step's entry is the replacement in effect for it, else its original
entry; a reader applies the replacements named by one version to every
step it reads (``Manifest``: the newest version read, or the version it is
pinned to), so it sees all of an excision or none of it, and every step
whole from one object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._entries import EntryTable
from torch_tgb.manifest._entry import TGBEntry
from torch_tgb.manifest._json import Fields, dump_json, load_json

__all__ = [
    "BUCKET_STEPS",
    "REPLACED_PREFIX",
    "ReplacedBucket",
    "ReplacedRef",
    "Superseded",
    "replaced_key",
]

#: steps per bucket of replacements (a bucket object holds at most this many entries: a few MB of JSON)
BUCKET_STEPS = 32768
REPLACED_PREFIX = "_tgb/replaced/"
_REF = re.compile(r"^([0-9]{1,20})-([0-9a-f]{8,32})$")
_AUDIT = re.compile(r"^_tgb/excisions/[0-9]{20}-[0-9a-f]{8}\.json$")
_FORMAT = "tgb-replaced/1"


def replaced_key(bucket: int, ref: str) -> str:
    """The key of bucket ``bucket``'s replacement object named ``ref`` (``<version>-<tok8>``)."""
    version, token = ref.split("-", 1)
    return f"{REPLACED_PREFIX}{bucket:06d}/{int(version):020d}-{token}.json"


@dataclass(frozen=True)
class ReplacedRef:
    """The replacements in effect at a version: one object reference per bucket that holds any.

    ``version``: the replacement version that last changed them (readers
    compare it to know whether anything changed); ``steps``: replaced steps
    in effect; ``excisions``: replacement versions so far; ``audit``: the key
    of the newest one's audit record (each names the one before it), so the
    audit trail is found from any version on, reclaimed log or not.
    """

    buckets: tuple[tuple[int, str], ...]
    version: int
    steps: int = 0
    excisions: int = 0
    audit: str = ""

    def ref(self, bucket: int) -> str | None:
        return dict(self.buckets).get(bucket)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"buckets": {str(b): r for b, r in self.buckets}, "version": self.version,
                               "steps": self.steps, "excisions": self.excisions}
        if self.audit:
            out["audit"] = self.audit
        return out

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> ReplacedRef:
        f = Fields(obj, what=f"{what} replaced")
        raw = f.mapping("buckets")
        buckets = []
        for b, r in raw.items():
            if not b.isdigit() or not isinstance(r, str) or not _REF.match(r):
                raise ManifestError(f"{what}: malformed replacement bucket {b!r}: {str(r)[:80]!r}")
            buckets.append((int(b), r))
        ref = cls(tuple(sorted(buckets)), f.integer("version", minimum=1), f.integer("steps"), f.integer("excisions"),
                  f.string("audit", default=""))
        f.done()
        if ref.audit and not _AUDIT.match(ref.audit):
            raise ManifestError(f"{what}: malformed audit key {ref.audit[:80]!r}")
        return ref


@dataclass(frozen=True)
class Superseded:
    """An object no entry in effect names any more: superseded by replacement ``version`` at ``time``,
    it served steps up to ``last_step``."""

    key: str
    version: int
    time: float
    last_step: int

    def to_json(self) -> list[Any]:
        return [self.key, self.version, self.time, self.last_step]


@dataclass(frozen=True)
class ReplacedBucket:
    """The replacements of one bucket: ``steps`` (sorted) with their ``entries`` and the version that set each."""

    bucket: int
    steps: np.ndarray
    entries: EntryTable
    by: np.ndarray
    superseded: tuple[Superseded, ...] = ()

    @classmethod
    def empty(cls, bucket: int) -> ReplacedBucket:
        return cls(bucket, np.zeros(0, np.int64), EntryTable.of([]), np.zeros(0, np.int64))

    def lookup(self) -> dict[int, TGBEntry]:
        return {int(s): e for s, e in zip(self.steps.tolist(), self.entries)}

    def entry(self, step: int) -> TGBEntry | None:
        i = int(np.searchsorted(self.steps, step))
        return self.entries[i] if i < len(self.steps) and int(self.steps[i]) == step else None

    def with_replacements(self, replacements: Mapping[int, TGBEntry], *, version: int,
                          superseded: Sequence[Superseded]) -> ReplacedBucket:
        """This bucket with ``replacements`` (step -> entry) set by ``version``, ``superseded`` objects added."""
        merged = self.lookup()
        by = dict(zip(self.steps.tolist(), self.by.tolist()))
        for step, entry in replacements.items():
            merged[step] = entry
            by[step] = version
        steps = sorted(merged)
        return ReplacedBucket(self.bucket, np.asarray(steps, dtype=np.int64), EntryTable.of([merged[s] for s in steps]),
                              np.asarray([by[s] for s in steps], dtype=np.int64), (*self.superseded, *superseded))

    def encode(self) -> bytes:
        return dump_json({"format": _FORMAT, "bucket": self.bucket, "steps": self.steps.tolist(),
                          "entries": self.entries.to_json(), "by": self.by.tolist(),
                          "superseded": [s.to_json() for s in self.superseded]})

    @classmethod
    def decode(cls, data: bytes, *, bucket: int, what: str) -> ReplacedBucket:
        f = Fields(load_json(data, what=what), what=what)
        if f.string("format") != _FORMAT or f.integer("bucket") != bucket:
            raise ManifestError(f"{what}: not bucket {bucket} of replacements ({_FORMAT})")
        steps, by = f.array("steps"), f.array("by")
        entries = EntryTable.from_json(f.mapping("entries"), what=what)
        superseded = []
        for item in f.array("superseded"):
            if (not isinstance(item, list) or len(item) != 4 or not isinstance(item[0], str)
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in item[1:])):
                raise ManifestError(f"{what}: malformed superseded object {str(item)[:80]!r}")
            superseded.append(Superseded(item[0], int(item[1]), float(item[2]), int(item[3])))
        f.done()
        if not (len(steps) == len(by) == len(entries)) or not all(type(x) is int for x in (*steps, *by)):
            raise ManifestError(f"{what}: steps, by and entries must be integers of one length")
        array = np.asarray(steps, dtype=np.int64)
        lo, hi = bucket * BUCKET_STEPS, (bucket + 1) * BUCKET_STEPS
        if len(array) and (bool((np.diff(array) <= 0).any()) or int(array[0]) < lo or int(array[-1]) >= hi):
            raise ManifestError(f"{what}: steps must be increasing within [{lo}, {hi})")
        return cls(bucket, array, entries, np.asarray(by, dtype=np.int64), tuple(superseded))
