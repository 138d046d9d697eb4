"""The producers' table of manifest format 2: fixed buckets of producers, referenced from every version.

Every format-2 version carries a :class:`TableRef`: one reference per bucket
(``""`` for an empty one) and the producers' counts by mark. Producer
``pid`` lives in bucket ``bucket_of(pid, n)``; a bucket is an immutable
object ``_tgb/producers/<b>/<v>-<tok>.json`` written by the committer of
slot ``v`` (``tok``: the first 8 hex digits of its commit token, so two
writers racing for one slot never overwrite each other's bucket). A version
therefore names the complete state of every producer at that version
without holding it: a committer reads the newest version and its own
bucket, never the versions in between (docs/protocol.md, *Format 2*), and a
reader reads neither buckets nor pipeline states.

Pure: names, counts and references only; encoding a bucket's producers is
``_producers.py``'s.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, replace
from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._json import Fields

__all__ = [
    "BUCKETS",
    "MAX_BUCKETS",
    "PRODUCERS_PREFIX",
    "STATE_PREFIX",
    "TableRef",
    "bucket_key",
    "bucket_of",
    "bucket_ref",
    "ref_version",
    "state_key",
    "state_ref",
]

#: buckets of a new namespace's table: a committer rewrites one bucket (~1/64 of the producers) per commit
BUCKETS = 64
#: most buckets a table may have (a version carries one reference per bucket)
MAX_BUCKETS = 1024
PRODUCERS_PREFIX = "_tgb/producers/"
STATE_PREFIX = "_tgb/state/"
_REF = re.compile(r"^([0-9]{1,20})-([0-9a-f]{8,32})$")


def bucket_of(producer_id: str, buckets: int) -> int:
    """The bucket of ``producer_id`` in a table of ``buckets`` (stable across processes and runs)."""
    return zlib.crc32(producer_id.encode()) % buckets


def bucket_ref(version: int, token: str) -> str:
    """The reference of a bucket written for slot ``version`` by the attempt with commit ``token``."""
    return f"{version}-{token[:8]}"


def state_ref(version: int, digest: str) -> str:
    """The reference of a pipeline state first committed in slot ``version`` with content digest ``digest``."""
    return f"{version}-{digest[:32]}"


def ref_version(ref: str) -> int:
    """The slot a (validated) reference was written for."""
    return int(ref.split("-", 1)[0])


def _check_ref(ref: object, *, what: str) -> str:
    if not isinstance(ref, str) or not _REF.match(ref):
        raise ManifestError(f"{what}: malformed object reference {str(ref)[:80]!r}")
    return ref


def bucket_key(bucket: int, ref: str) -> str:
    """The key of bucket ``bucket``'s object named ``ref``."""
    v, tok = ref.split("-", 1)
    return f"{PRODUCERS_PREFIX}{bucket:04d}/{int(v):020d}-{tok}.json"


def state_key(producer_id: str, ref: str) -> str:
    """The key of producer ``producer_id``'s pipeline state named ``ref``."""
    v, digest = ref.split("-", 1)
    return f"{STATE_PREFIX}{producer_id}/{int(v):020d}-{digest}.json"


#: the marks a table counts (``ProducerState.status``)
_MARKS = ("open", "closed", "done")


@dataclass(frozen=True)
class TableRef:
    """A format-2 version's producers: one reference per bucket and the counts of producers by mark.

    ``declared_done``: producers of the namespace's job marked done (the
    job's seal rule compares it with the job's size: O(1) per version).
    """

    buckets: tuple[str, ...]
    open: int = 0
    closed: int = 0
    done: int = 0
    declared_done: int = 0

    @classmethod
    def empty(cls, buckets: int = BUCKETS) -> TableRef:
        return cls(("",) * buckets)

    @property
    def producers(self) -> int:
        """How many producers the table holds."""
        return self.open + self.closed + self.done

    def count(self, mark: str) -> int:
        return int(getattr(self, mark))

    def key(self, bucket: int) -> str | None:
        """The object of ``bucket`` (``None``: empty)."""
        ref = self.buckets[bucket]
        return bucket_key(bucket, ref) if ref else None

    def with_bucket(self, bucket: int, ref: str, *, before: str | None, after: str, declared: bool) -> TableRef:
        """This table with ``bucket`` now at ``ref`` and one producer's mark moved from ``before`` to ``after``.

        ``before=None``: a producer new to the table. ``declared``: whether it
        belongs to the namespace's job (it then counts in ``declared_done``).
        """
        if after not in _MARKS or (before is not None and before not in _MARKS):
            raise ValueError(f"marks must be among {_MARKS}, got {before!r} -> {after!r}")
        counts = {m: self.count(m) for m in _MARKS}
        if before is not None:
            counts[before] -= 1
        counts[after] += 1
        done_delta = int(after == "done") - int(before == "done")
        buckets = list(self.buckets)
        buckets[bucket] = ref
        return replace(self, buckets=tuple(buckets), declared_done=self.declared_done + done_delta * int(declared),
                       **counts)

    def to_json(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "open": self.open, "closed": self.closed, "done": self.done,
                "declared_done": self.declared_done}

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> TableRef:
        f = Fields(obj, what=f"{what} table")
        buckets = f.array("buckets")
        if not 1 <= len(buckets) <= MAX_BUCKETS:
            raise ManifestError(f"{what}: a table has 1..{MAX_BUCKETS} buckets, got {len(buckets)}")
        refs = tuple(b if b == "" else _check_ref(b, what=what) for b in buckets)
        table = cls(refs, f.integer("open"), f.integer("closed"), f.integer("done"), f.integer("declared_done"))
        f.done()
        if table.declared_done > table.done:
            raise ManifestError(f"{what}: declared_done={table.declared_done} exceeds done={table.done}")
        return table


def check_ref(ref: object, *, what: str) -> str:
    """``ref`` if it is a well-formed object reference (``<version>-<hex>``), else :class:`ManifestError`."""
    return _check_ref(ref, what=what)
