"""What one Reclaimer pass leaves for the next: ``_tgb/reclaimer.json``, so an idle pass reads almost nothing.

``clean_below``: every version, snapshot and table object below this
version has been deleted, with the objects its versions named (a pass
writes it only after all of its deletes, so a pass killed midway leaves the
older value and the next pass finishes the job by listing). ``swept_at``:
when the last sweep of uncommitted objects and partial writes finished (a
sweep lists ``data/`` and reads every version above the boundary, so it
runs once per ``sweep_interval``, not every pass). A missing or unreadable
record means "nothing is known": the next pass does everything, as every
pass did before this record existed. Only the Reclaimer reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_tgb.errors import ManifestError, ObjectNotFound
from torch_tgb.manifest._json import Fields, dump_json, load_json
from torch_tgb.storage import ObjectStore

__all__ = ["RECLAIMER_KEY", "PassRecord"]

RECLAIMER_KEY = "_tgb/reclaimer.json"
_FORMAT = "tgb-reclaimer/1"


@dataclass(frozen=True)
class PassRecord:
    clean_below: int = 0
    swept_at: float = float("-inf")

    @classmethod
    def read(cls, store: ObjectStore) -> PassRecord:
        try:
            data = store.get_range(RECLAIMER_KEY, 0, 1 << 16)
            f = Fields(load_json(data, what=RECLAIMER_KEY, max_bytes=1 << 16), what=RECLAIMER_KEY)
            if f.string("format") != _FORMAT:
                return cls()
            record = cls(f.integer("clean_below"), f.number("swept_at"))
            f.done()
            return record
        except (ObjectNotFound, ManifestError):
            return cls()  # nothing known: this pass does everything

    def write(self, store: ObjectStore) -> None:
        swept = self.swept_at if self.swept_at != float("-inf") else 0.0
        store.put(RECLAIMER_KEY, dump_json({"format": _FORMAT, "clean_below": self.clean_below, "swept_at": swept}))
