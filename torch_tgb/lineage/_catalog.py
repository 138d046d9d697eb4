"""The lineage catalog: which merged runs hold the index up to which manifest version, and their fences.

``_tgb/lineage/catalog/<g:020d>.json`` is created once per generation with
``put_if_absent`` by a compaction (``_compact.py``); the newest generation
listed is the catalog. It names each run (at most one per level) with its
count, the versions it covers, its last hash and its *fences* (the hash of
every ``BLOCK``-th entry, base64 of little-endian u64), so a lookup reads one
block per run and never a run's own header. ``covers``: every version up to
it is in the runs; deltas above it are read as they are.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from torch_tgb.errors import CorruptObject, ManifestError
from torch_tgb.lineage._runs import BLOCK
from torch_tgb.manifest._json import Fields, dump_json, load_json

__all__ = ["Catalog", "RunInfo"]

_FORMAT = "tgb-lineage/1"


@dataclass(frozen=True)
class RunInfo:
    """A merged run: its key, level, entries, versions ``lo .. hi``, last hash, fences and summary."""

    key: str
    level: int
    count: int
    lo: int
    hi: int
    last: int
    fences: np.ndarray = field(repr=False, compare=False)
    summary: dict[str, Any] = field(repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "level": self.level, "count": self.count, "lo": self.lo, "hi": self.hi,
                "last": str(self.last), "fences": base64.b64encode(self.fences.astype("<u8").tobytes()).decode(),
                "summary": self.summary}

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> RunInfo:
        f = Fields(obj, what=what)
        key, level, count = f.string("key"), f.integer("level", minimum=1), f.integer("count")
        lo, hi, last = f.integer("lo"), f.integer("hi"), f.string("last")
        try:
            fences = np.frombuffer(base64.b64decode(f.string("fences"), validate=True), dtype="<u8").astype(np.uint64)
            last_hash = int(last)
        except ValueError as e:
            raise CorruptObject(f"{what}: malformed fences or last hash: {e}") from e
        summary = f.mapping("summary")
        f.done()
        if len(fences) != -(-count // BLOCK) or (len(fences) > 1 and bool((fences[1:] < fences[:-1]).any())):
            raise CorruptObject(f"{what}: {len(fences)} fences for {count} entries, or not sorted")
        return cls(key, level, count, lo, hi, last_hash, fences, summary)


@dataclass(frozen=True)
class Catalog:
    """Generation ``generation``: runs holding every version up to ``covers``."""

    generation: int = 0
    covers: int = 0
    runs: tuple[RunInfo, ...] = ()
    time: float = 0.0

    def level(self, level: int) -> RunInfo | None:
        return next((r for r in self.runs if r.level == level), None)

    def encode(self) -> bytes:
        return dump_json({"format": _FORMAT, "generation": self.generation, "covers": self.covers,
                          "runs": [r.to_json() for r in self.runs], "time": self.time})

    @classmethod
    def decode(cls, data: bytes, *, generation: int, what: str) -> Catalog:
        f = Fields(load_json(data, what=what), what=what)
        if f.string("format") != _FORMAT:
            raise ManifestError(f"{what}: not a lineage catalog ({_FORMAT})")
        stored = f.integer("generation", minimum=1)
        if stored != generation:
            raise ManifestError(f"{what}: says generation={stored}")
        catalog = cls(stored, f.integer("covers"), tuple(RunInfo.from_json(r, what=f"{what} run")
                                                          for r in f.array("runs")), f.number("time"))
        f.done()
        return catalog
