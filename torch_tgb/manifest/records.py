"""The records of the manifest log and their JSON form (see docs/protocol.md).

Each record validates on parse: every field present with its type, every
object key inside ``data/`` of the namespace (``TGBEntry``, ``_entry.py``),
producers' offsets consecutive inside a version. A violation is a
:class:`ManifestError` naming the object (and the version), never a
half-read record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._checks import MAX_STATE_BYTES, check_metadata, encode_producer_state, validate_producer_id
from torch_tgb.manifest._entry import DATA_PREFIX, MAX_FOOTER_BYTES, TGBEntry
from torch_tgb.manifest._json import MAX_DATASET_BYTES, Fields, dump_json, load_json
from torch_tgb.manifest.jobs import JobSpec

__all__ = [
    "DATA_PREFIX",
    "EMPTY_STATE",
    "FORMAT",
    "MAX_FOOTER_BYTES",
    "MAX_STATE_BYTES",
    "MAX_VERSION_ENTRIES",
    "PRODUCER_STATUSES",
    "DatasetInfo",
    "GCBoundary",
    "JobSpec",
    "ManifestState",
    "ProducerState",
    "TGBEntry",
    "Version",
    "check_metadata",
    "encode_producer_state",
    "validate_producer_id",
]

#: the ``format`` field of every manifest object this code writes and reads
FORMAT = "tgb-manifest/1"
_TOKEN = re.compile(r"^[0-9a-f]{8,64}$")
#: a version's field of TGB entries
ENTRIES = "entries"


def _check_format(f: Fields) -> None:
    fmt = f.string("format")
    if fmt != FORMAT:
        raise ManifestError(f"{f.what}: format {fmt!r} is not {FORMAT!r} (written by another torch_tgb version?)")


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
    """

    epoch: int
    next_offset: int
    committed_at: float = 0.0
    state: Mapping[str, Any] | None = None
    status: str = "open"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"epoch": self.epoch, "next_offset": self.next_offset, "committed_at": self.committed_at}
        if self.state is not None:
            out["state"] = dict(self.state)
        if self.status != "open":
            out["status"] = self.status
        return out

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
        f.done()
        if state.status not in PRODUCER_STATUSES:
            raise ManifestError(f"{what}: status={state.status!r} is not one of {PRODUCER_STATUSES}")
        return state


def _producers_from_json(obj: Mapping[str, Any], *, what: str) -> dict[str, ProducerState]:
    producers = {}
    for pid, value in obj.items():
        try:
            validate_producer_id(pid)
        except ValueError as e:
            raise ManifestError(f"{what}: {e}") from e
        producers[pid] = ProducerState.from_json(value, what=f"{what} producer {pid!r}")
    return producers


#: most entries one version carries: an entry's JSON is at most ~520 bytes (a 128-character producer id), so a
#: full version stays near half the metadata limit a reader accepts, with room for the producer's state
MAX_VERSION_ENTRIES = 8192


@dataclass(frozen=True)
class Version:
    """One manifest version: a delta on top of version ``number - 1``.

    ``first_step`` is the number of steps committed before it, so the steps
    this version adds are ``first_step .. first_step + len(entries) - 1``.
    ``producers`` holds only the producers whose state this version changes.
    ``job``: the job of declared shards, on the version that registers the
    namespace's first producer only (see :mod:`torch_tgb.manifest.jobs`).
    """

    number: int
    token: str
    first_step: int
    entries: tuple[TGBEntry, ...] = ()
    producers: Mapping[str, ProducerState] = field(default_factory=dict)
    sealed: bool = False
    time: float = 0.0
    job: JobSpec | None = None

    @property
    def stop_step(self) -> int:
        """One past the last step this version adds."""
        return self.first_step + len(self.entries)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": self.number,
            "token": self.token,
            "first_step": self.first_step,
            "entries": [e.to_json() for e in self.entries],
            "producers": {pid: s.to_json() for pid, s in sorted(self.producers.items())},
            "sealed": self.sealed,
            "time": self.time,
        }
        if self.job is not None:  # written only when declared: other versions' bytes stay as they were
            out["job"] = self.job.to_json()
        return out

    def encode(self) -> bytes:
        return dump_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes, *, number: int, where: str = "") -> Version:
        """Parse and validate the bytes of ``_tgb/log/<number>``; errors name the version."""
        what = f"{where}manifest version={number}"
        # the entries are checked item by item to be flat objects of scalars: no depth walk over them
        f = Fields(load_json(data, what=what, flat=ENTRIES), what=what)
        _check_format(f)
        stored = f.integer("version", minimum=1)
        if stored != number:
            raise ManifestError(f"{what}: object says version={stored}")
        token = f.string("token")
        if not _TOKEN.match(token):
            raise ManifestError(f"{what}: malformed commit token {token[:80]!r}")
        first_step = f.integer("first_step")
        entries = TGBEntry.from_json_list(f.array(ENTRIES), what=what)
        producers = _producers_from_json(f.mapping("producers"), what=what)
        job = f.optional_mapping("job")
        version = cls(number, token, first_step, entries, producers, f.boolean("sealed"), f.number("time"),
                      None if job is None else JobSpec.from_json(job, what=what))
        f.done()
        version.check_offsets(what=what)
        return version

    def check_offsets(self, *, what: str) -> None:
        """Each producer's entries are consecutive and its state says where they end."""
        last: dict[str, int] = {}
        for i, entry in enumerate(self.entries):
            previous = last.get(entry.producer)
            if previous is not None and entry.offset != previous + 1:
                raise ManifestError(
                    f"{what}: entry {i} of producer {entry.producer!r} has offset={entry.offset}, "
                    f"expected {previous + 1} (offsets must be consecutive)"
                )
            last[entry.producer] = entry.offset
        for pid, offset in last.items():
            state = self.producers.get(pid)
            if state is None or state.next_offset != offset + 1:
                raise ManifestError(
                    f"{what}: producer {pid!r} appends up to offset={offset} but its state says "
                    f"next_offset={None if state is None else state.next_offset}"
                )


@dataclass(frozen=True)
class ManifestState:
    """The full state at a version: what a snapshot stores and ``head()`` returns.

    ``job``: the namespace's job of declared shards, ``None`` for a namespace
    created without one (its producers come and go freely).
    """

    version: int
    num_steps: int
    sealed: bool
    producers: Mapping[str, ProducerState]
    job: JobSpec | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": self.version,
            "num_steps": self.num_steps,
            "sealed": self.sealed,
            "producers": {pid: s.to_json() for pid, s in sorted(self.producers.items())},
        }
        if self.job is not None:
            out["job"] = self.job.to_json()
        return out

    def encode(self) -> bytes:
        return dump_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes, *, what: str) -> ManifestState:
        return cls.from_json(load_json(data, what=what), what=what)

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> ManifestState:
        f = Fields(obj, what=what)
        _check_format(f)
        job = f.optional_mapping("job")
        state = cls(
            f.integer("version"), f.integer("num_steps"), f.boolean("sealed"),
            _producers_from_json(f.mapping("producers"), what=what),
            None if job is None else JobSpec.from_json(job, what=what),
        )
        f.done()
        return state


EMPTY_STATE = ManifestState(0, 0, False, {})


@dataclass(frozen=True)
class GCBoundary:
    """Versions below ``version`` may be deleted; steps below ``step`` are reclaimed.

    A snapshot of ``version`` exists, ``version`` itself is kept. A producer
    that creates a version below ``version`` whose commit the snapshot does
    not include has written into a reclaimed slot: its commit failed.
    """

    version: int = 0
    step: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": self.version, "step": self.step}

    @classmethod
    def decode(cls, data: bytes, *, what: str) -> GCBoundary:
        f = Fields(load_json(data, what=what), what=what)
        _check_format(f)
        boundary = cls(f.integer("version"), f.integer("step"))
        f.done()
        return boundary


@dataclass(frozen=True)
class DatasetInfo:
    """``_tgb/dataset.json``: written once, compared by every producer and consumer."""

    layout: Mapping[str, Any]
    schema: Mapping[str, Any]
    metadata: Mapping[str, Any]
    fingerprint: str
    created_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "layout": dict(self.layout),
            "schema": dict(self.schema),
            "metadata": dict(self.metadata),
            "fingerprint": self.fingerprint,
            "created_at": self.created_at,
        }

    def encode(self) -> bytes:
        return dump_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes, *, what: str) -> DatasetInfo:
        f = Fields(load_json(data, what=what, max_bytes=MAX_DATASET_BYTES), what=what)
        _check_format(f)
        info = cls(f.mapping("layout"), f.mapping("schema"), f.mapping("metadata"), f.string("fingerprint"), f.number("created_at"))
        f.done()
        return info
