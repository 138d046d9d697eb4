"""The records of the manifest log and their JSON form (see docs/protocol.md).

Each record validates on parse: every field present with its type, every
object key inside ``data/`` of the namespace, producers' offsets consecutive
inside a version. A violation is a :class:`ManifestError` naming the object
(and the version), never a half-read record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, cast

from torch_tgb.errors import InvalidKey, ManifestError
from torch_tgb.manifest._json import Fields, dump_json, load_json
from torch_tgb.manifest.jobs import JobSpec
from torch_tgb.storage import validate_key

__all__ = [
    "FORMAT",
    "PRODUCER_STATUSES",
    "DatasetInfo",
    "GCBoundary",
    "JobSpec",
    "ManifestState",
    "ProducerState",
    "MAX_STATE_BYTES",
    "TGBEntry",
    "Version",
    "encode_producer_state",
    "validate_producer_id",
]

#: the ``format`` field of every manifest object this code writes and reads
FORMAT = "tgb-manifest/1"
DATA_PREFIX = "data/"
#: a footer larger than this is refused before anyone reads it (a real one is KBs)
MAX_FOOTER_BYTES = 64 * 1024 * 1024
#: largest pipeline state (canonical JSON) a producer may commit with an offset. A snapshot
#: holds every producer's state and a reader accepts 8 MiB of metadata: 256 producers at this
#: limit (a source position is a few hundred bytes)
MAX_STATE_BYTES = 32 * 1024
_PRODUCER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TOKEN = re.compile(r"^[0-9a-f]{8,64}$")


def validate_producer_id(producer_id: object) -> str:
    """A producer id is 1-128 characters ``[A-Za-z0-9._-]``, starting alphanumeric.

    It becomes a path segment of object keys, so nothing else is allowed.
    """
    if not isinstance(producer_id, str) or not _PRODUCER_ID.match(producer_id):
        raise ValueError(
            f"producer_id={producer_id!r} must be 1-128 characters of [A-Za-z0-9._-] starting with a letter or digit"
        )
    return producer_id


def encode_producer_state(state: object, *, producer_id: str, offset: int) -> dict[str, Any]:
    """Check that ``state`` is a JSON object of at most :data:`MAX_STATE_BYTES`; return its JSON round trip.

    The round trip is what a restarted producer will read back (tuples become
    lists, keys strings), and it is a private copy the caller cannot mutate
    while the commit is pending. ``ValueError`` names the producer and offset.
    """
    where = f"producer {producer_id!r} offset={offset}"
    if not isinstance(state, Mapping):
        raise ValueError(f"{where}: state must be a JSON object (a dict), got {type(state).__name__}")
    try:
        data = dump_json(state)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: state is not JSON-serialisable: {e}") from e
    if len(data) > MAX_STATE_BYTES:
        raise ValueError(
            f"{where}: state is {len(data)} bytes of JSON, over the limit of {MAX_STATE_BYTES} "
            "(commit a position, not the data: e.g. file index and record offset)"
        )
    return load_json(data, what=f"state of {where}")


def _check_format(f: Fields) -> None:
    fmt = f.string("format")
    if fmt != FORMAT:
        raise ManifestError(f"{f.what}: format {fmt!r} is not {FORMAT!r} (written by another torch_tgb version?)")


@dataclass(frozen=True)
class TGBEntry:
    """One committed TGB. Its step is its position in the log, not stored.

    A TGB occupies bytes ``[start, size)`` of object ``key``: ``size`` is
    where the TGB ends (its trailer's last byte + 1), so
    ``footer_offset + footer_length + TRAILER_SIZE == size`` always holds and
    every offset in its footer is absolute within the object. A one-TGB
    object has ``start == 0`` and ``size`` = the object's size (the only form
    older writers produce: their entries parse unchanged). A *segment*
    object holds several consecutive TGBs of one producer; ``object_size``
    records its total size (``None``: the object is exactly ``size`` bytes).
    ``start`` and ``object_size`` are written to JSON only when they differ
    from those defaults.
    """

    key: str
    size: int
    footer_offset: int
    footer_length: int
    producer: str
    offset: int
    samples: int = 0
    tokens: int = 0
    start: int = 0
    object_size: int | None = None

    @property
    def length(self) -> int:
        """Bytes of this TGB (its share of the object)."""
        return self.size - self.start

    @property
    def total_size(self) -> int:
        """Size of the whole object holding this TGB."""
        return self.size if self.object_size is None else self.object_size

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "size": self.size,
            "footer_offset": self.footer_offset,
            "footer_length": self.footer_length,
            "producer": self.producer,
            "offset": self.offset,
            "samples": self.samples,
            "tokens": self.tokens,
        }
        if self.start:
            out["start"] = self.start
        if self.object_size is not None:
            out["object_size"] = self.object_size
        return out

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> TGBEntry:
        entry = _entry_fast(obj)  # the common, well-formed case without per-field bookkeeping
        if entry is None:
            entry = cls._from_fields(obj, what=what)  # anything else: checked field by field, worded
        entry.validate(what=what)
        return entry

    @classmethod
    def _from_fields(cls, obj: object, *, what: str) -> TGBEntry:
        f = Fields(obj, what=what)
        entry = cls(
            key=f.string("key"),
            size=f.integer("size"),
            footer_offset=f.integer("footer_offset"),
            footer_length=f.integer("footer_length"),
            producer=f.string("producer"),
            offset=f.integer("offset"),
            samples=f.integer("samples", default=0),
            tokens=f.integer("tokens", default=0),
            start=f.integer("start", default=0),
            object_size=f.integer("object_size", default=0) or None,  # no object has 0 bytes
        )
        f.done()
        return entry

    def validate(self, *, what: str) -> None:
        """Raise :class:`ManifestError` unless the entry is well-formed and inside the namespace."""
        try:
            validate_key(self.key)
        except InvalidKey as e:
            raise ManifestError(f"{what}: {e}") from e
        if not self.key.startswith(DATA_PREFIX):
            raise ManifestError(f"{what}: key {self.key!r} is outside {DATA_PREFIX!r} of the namespace")
        try:
            validate_producer_id(self.producer)
        except ValueError as e:
            raise ManifestError(f"{what}: {e}") from e
        if self.footer_length > MAX_FOOTER_BYTES:
            raise ManifestError(
                f"{what}: footer_length={self.footer_length} exceeds {MAX_FOOTER_BYTES} bytes (key {self.key!r})"
            )
        if not (0 <= self.start <= self.footer_offset) or (
            self.object_size is not None and self.object_size < self.size
        ):
            raise ManifestError(
                f"{what}: TGB [{self.start}, {self.size}) with footer at {self.footer_offset} does not fit "
                f"in object {self.key!r} of {self.total_size} bytes"
            )
        if self.footer_offset + self.footer_length > self.size:
            raise ManifestError(
                f"{what}: footer [{self.footer_offset}, {self.footer_offset + self.footer_length}) "
                f"lies outside the object's {self.size} bytes (key {self.key!r})"
            )


_ENTRY_FIELDS = frozenset(f.name for f in fields(TGBEntry))  # the JSON keys are the field names (to_json)


def _entry_fast(obj: object) -> TGBEntry | None:
    """A :class:`TGBEntry` from a well-formed JSON object, or ``None`` (the field-by-field path decides).

    Accepts exactly what ``TGBEntry._from_fields`` accepts and nothing more
    (``tests/manifest/test_entry_decode.py`` holds the two paths to that), so
    only error wording lives in the slow path.
    """
    if type(obj) is not dict or not obj.keys() <= _ENTRY_FIELDS:
        return None
    get = obj.get
    key, producer = get("key"), get("producer")
    numbers = (get("size"), get("footer_offset"), get("footer_length"), get("offset"),
               get("samples", 0), get("tokens", 0), get("start", 0), get("object_size", 0))
    if type(key) is not str or type(producer) is not str:
        return None
    for n in numbers:
        if type(n) is not int or n < 0:
            return None
    size, footer_offset, footer_length, offset, samples, tokens, start, object_size = cast("tuple[int, ...]", numbers)
    return TGBEntry(key, size, footer_offset, footer_length, producer, offset, samples, tokens, start,
                    object_size or None)


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
        f = Fields(load_json(data, what=what), what=what)
        _check_format(f)
        stored = f.integer("version", minimum=1)
        if stored != number:
            raise ManifestError(f"{what}: object says version={stored}")
        token = f.string("token")
        if not _TOKEN.match(token):
            raise ManifestError(f"{what}: malformed commit token {token[:80]!r}")
        first_step = f.integer("first_step")
        entries = tuple(
            TGBEntry.from_json(e, what=f"{what} entry {i}") for i, e in enumerate(f.array("entries"))
        )
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
        f = Fields(load_json(data, what=what), what=what)
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
        f = Fields(load_json(data, what=what, max_bytes=1024 * 1024), what=what)
        _check_format(f)
        info = cls(f.mapping("layout"), f.mapping("schema"), f.mapping("metadata"), f.string("fingerprint"), f.number("created_at"))
        f.done()
        return info
