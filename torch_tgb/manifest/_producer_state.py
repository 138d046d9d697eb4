"""A producer's record in the manifest (``ProducerState``) and the formats' names: what ``records.py`` and the
producers' table (``_producers.py``) both build on."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._checks import validate_producer_id
from torch_tgb.manifest._json import Fields
from torch_tgb.manifest._table import check_ref

__all__ = ["FORMAT", "FORMAT2", "TOKEN", "INLINE_STATE_BYTES", "PRODUCER_STATUSES", "ProducerState", "check_skipped",
           "producers_from_json"]

#: a pipeline state up to this many bytes of JSON is kept in its producer's bucket; a larger one in its own object
INLINE_STATE_BYTES = 4096
#: the ``format`` field of the metadata objects of format 1 (and of the hint, boundary and dataset.json)
FORMAT = "tgb-manifest/1"
#: the ``format`` of versions and snapshots that carry a producers' table (docs/protocol.md, *Format 2*)
FORMAT2 = "tgb-manifest/2"
_FORMATS = (FORMAT, FORMAT2)
#: a commit token: what a version, a table bucket and a producer state record of the commit that wrote them
TOKEN = re.compile(r"^[0-9a-f]{8,64}$")
#: a producer's mark in the log: started and may commit more ("open"), closed and may
#: come back ("closed"), finished for good ("done"; the last one done seals the namespace)
PRODUCER_STATUSES = ("open", "closed", "done")


@dataclass(frozen=True)
class ProducerState:
    """What the log knows about one producer: its newest epoch, first uncommitted offset and mark.

    ``state``: the producer's pipeline state after offset ``next_offset - 1``
    (the state from which offset ``next_offset`` is produced), as handed to
    ``Producer.append(..., state=)``; ``None`` if it gave none. Omitted from
    the JSON when ``None``, so versions written before it existed still parse.
    ``status``: its mark, one of :data:`PRODUCER_STATUSES`; omitted when
    ``"open"`` for the same reason.

    Format 2 (a producers' table, ``_table.py``) keeps a large pipeline
    state out of line: ``state_ref`` names its object
    (``_tgb/state/<producer>/...``, read only by that producer) and
    ``state`` is then ``None``; ``token`` is the commit token of the version
    that last changed this producer, by which a committer whose
    acknowledgement was lost recognises its own commit.
    """

    epoch: int
    next_offset: int
    committed_at: float = 0.0
    state: Mapping[str, Any] | None = None
    status: str = "open"
    state_ref: str | None = None
    token: str | None = None
    #: the version that last changed this producer (format 2)
    at: int | None = None
    #: samples its pipeline dropped up to ``next_offset``, by reason (``produce()``; format 2 records, not deltas)
    skipped: Mapping[str, int] | None = None

    def to_json(self, *, pipeline: bool = True) -> dict[str, Any]:
        """The JSON object; ``pipeline=False`` leaves out the pipeline state and token (a format-2 version's delta)."""
        out: dict[str, Any] = {"epoch": self.epoch, "next_offset": self.next_offset, "committed_at": self.committed_at}
        if self.status != "open":
            out["status"] = self.status
        if pipeline:
            if self.state is not None:
                out["state"] = dict(self.state)
            if self.state_ref is not None:
                out["state_ref"] = self.state_ref
            if self.token is not None:
                out["token"] = self.token
            if self.at is not None:
                out["at"] = self.at
            if self.skipped:
                out["skipped"] = dict(self.skipped)
        return out

    @property
    def delta(self) -> ProducerState:
        """This state without its pipeline state and token: what a format-2 version records of it."""
        return ProducerState(self.epoch, self.next_offset, self.committed_at, status=self.status)

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> ProducerState:
        f = Fields(obj, what=what)
        state = cls(
            f.integer("epoch", minimum=1),
            f.integer("next_offset"),
            f.number("committed_at", default=0.0),
            f.optional_mapping("state"),
            f.string("status", default="open"),
        )
        ref = f.string("state_ref", default="")
        token = f.string("token", default="")
        at = f.integer("at", default=0)
        skipped = f.optional_mapping("skipped")
        f.done()
        if skipped is not None:
            object.__setattr__(state, "skipped", check_skipped(skipped, what=what, error=ManifestError))
        if at:
            object.__setattr__(state, "at", at)
        if state.status not in PRODUCER_STATUSES:
            raise ManifestError(f"{what}: status={state.status!r} is not one of {PRODUCER_STATUSES}")
        if ref or token:
            if ref and state.state is not None:
                raise ManifestError(f"{what}: holds both a state and a state_ref")
            if token and not TOKEN.match(token):
                raise ManifestError(f"{what}: malformed commit token {token[:80]!r}")
            object.__setattr__(state, "state_ref", check_ref(ref, what=what) if ref else None)
            object.__setattr__(state, "token", token or None)
        return state


def check_skipped(skipped: object, *, what: str, error: type[Exception] = ValueError) -> dict[str, int]:
    """``skipped`` as a sorted ``{reason: count}`` of non-negative integer counts; ``error`` names what is wrong."""
    if not isinstance(skipped, Mapping):
        raise error(f"{what}: skipped must be a mapping of reason to count, got {type(skipped).__name__}")
    out = {}
    for reason, n in skipped.items():
        if not isinstance(reason, str) or not reason or len(reason) > 64:
            raise error(f"{what}: a skip reason must be a string of 1-64 characters, got {reason!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise error(f"{what}: skipped[{reason!r}] must be a non-negative integer, got {n!r}")
        out[reason] = n
    if len(out) > 256:
        raise error(f"{what}: {len(out)} skip reasons (at most 256)")
    return dict(sorted(out.items()))


def producers_from_json(obj: Mapping[str, Any], *, what: str) -> dict[str, ProducerState]:
    producers = {}
    for pid, value in obj.items():
        try:
            validate_producer_id(pid)
        except ValueError as e:
            raise ManifestError(f"{what}: {e}") from e
        producers[pid] = ProducerState.from_json(value, what=f"{what} producer {pid!r}")
    return producers


