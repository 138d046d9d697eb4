"""Steps skipped by agreement: one immutable marker per TGB step a reader found corrupt or missing.

A reader with ``ReaderOptions(on_corrupt="skip_step")`` that cannot read a
TGB publishes that fact with a conditional create of
``_tgb/skipped/<step:020d>.json``; the first writer wins, the content names
the reason, the object and who found it. Every reader of the namespace lists
the markers when it opens (one LIST, a GET each: markers are few, bounded by
``max_skipped``), so a restart, a resume and a reader at another world size
skip exactly the marked steps; the ranks of a running job agree on a step
found bad meanwhile over their process group (``distributed/agreement.py``).
Markers are keyed by TGB step (what is broken is a TGB), whatever the
reader's topology. The Reclaimer deletes markers below the GC boundary.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from torch_tgb.errors import ManifestError, ObjectNotFound
from torch_tgb.manifest._json import Fields, dump_json, load_json
from torch_tgb.storage import ObjectStore

__all__ = ["SKIPPED_PREFIX", "SkipRecord", "delete_skips_below", "mark_skipped", "skip_key", "skipped_steps"]

SKIPPED_PREFIX = "_tgb/skipped/"
_FORMAT = "tgb-skip/1"
#: most bytes of a marker a reader accepts (a reason is a line of text)
_MAX_BYTES = 16 << 10
#: most markers a reader reads at open (more means a namespace no run should train on: refused)
MAX_MARKERS = 100_000


def skip_key(step: int) -> str:
    return f"{SKIPPED_PREFIX}{step:020d}.json"


@dataclass(frozen=True)
class SkipRecord:
    """Why TGB ``step`` is skipped: ``reason`` (the error's message), the object, who found it and when."""

    step: int
    reason: str
    key: str = ""
    found_by: str = ""
    time: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"format": _FORMAT, "step": self.step, "reason": self.reason[:2000], "key": self.key,
                "found_by": self.found_by, "time": self.time}

    @classmethod
    def decode(cls, data: bytes, *, what: str) -> SkipRecord:
        f = Fields(load_json(data, what=what, max_bytes=_MAX_BYTES), what=what)
        if f.string("format") != _FORMAT:
            raise ManifestError(f"{what}: not a skip marker")
        record = cls(f.integer("step"), f.string("reason"), f.string("key", default=""),
                     f.string("found_by", default=""), f.number("time", default=0.0))
        f.done()
        return record


def mark_skipped(store: ObjectStore, step: int, reason: str, *, key: str = "", found_by: str | None = None) -> bool:
    """Publish that TGB ``step`` is skipped (conditional create); False if another reader marked it first."""
    who = found_by if found_by is not None else f"{socket.gethostname()}"
    record = SkipRecord(step, reason, key, who, time.time())
    return store.put_if_absent(skip_key(step), dump_json(record.to_json()))


def skipped_steps(store: ObjectStore, *, where: str = "") -> dict[int, SkipRecord]:
    """Every marker of the namespace, by TGB step (one LIST, one bounded read each)."""
    out: dict[int, SkipRecord] = {}
    keys = [k for k in store.list(SKIPPED_PREFIX) if k.endswith(".json")]
    if len(keys) > MAX_MARKERS:
        raise ManifestError(f"{where}{len(keys)} steps are marked skipped (over {MAX_MARKERS}): this namespace is "
                            "too damaged to train on; `tgb verify` it")
    for key in keys:
        try:
            data = store.get_range(key, 0, _MAX_BYTES + 1)
        except ObjectNotFound:
            continue  # deleted by the Reclaimer meanwhile: below the boundary, never read again
        record = SkipRecord.decode(data, what=f"{where}{key}")
        if skip_key(record.step) != key:
            raise ManifestError(f"{where}{key}: the marker names step={record.step}")
        out[record.step] = record
    return out


def delete_skips_below(store: ObjectStore, step: int) -> int:
    """Delete the markers of TGB steps below ``step`` (reclaimed: no reader reads them); how many."""
    doomed = [k for k in store.list(SKIPPED_PREFIX) if k.endswith(".json") and k < skip_key(step)]
    if doomed:
        store.delete(doomed)
    return len(doomed)
