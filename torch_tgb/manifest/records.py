"""The records of the manifest log and their JSON form (see docs/protocol.md).

Each record validates on parse: every field present with its type, every
object key inside ``data/`` of the namespace (``TGBEntry``, ``_entry.py``),
producers' offsets consecutive inside a version. A violation is a
:class:`ManifestError` naming the object (and the version), never a
half-read record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._checks import MAX_STATE_BYTES, check_metadata, encode_producer_state, validate_producer_id
from torch_tgb.manifest._entries import EntryTable
from torch_tgb.manifest._entry import DATA_PREFIX, TGBEntry
from torch_tgb.manifest._dataset_info import DatasetInfo
from torch_tgb.manifest._json import Fields, dump_json, load_json
from torch_tgb.manifest._producer_state import (
    _FORMATS,
    FORMAT,
    FORMAT2,
    INLINE_STATE_BYTES,
    PRODUCER_STATUSES,
    TOKEN,
    ProducerState,
    producers_from_json,
)
from torch_tgb.manifest._producers import ProducerTable
from torch_tgb.manifest._replaced import ReplacedRef
from torch_tgb.manifest._table import TableRef
from torch_tgb.manifest.jobs import JobSpec

__all__ = [
    "DATA_PREFIX",
    "EMPTY_STATE",
    "FORMAT",
    "FORMAT2",
    "INLINE_STATE_BYTES",
    "EntryTable",
    "MAX_STATE_BYTES",
    "MAX_VERSION_ENTRIES",
    "PRODUCER_STATUSES",
    "DatasetInfo",
    "GCBoundary",
    "JobSpec",
    "ManifestState",
    "ProducerState",
    "ReplacedRef",
    "TGBEntry",
    "TableRef",
    "Version",
    "check_metadata",
    "encode_producer_state",
    "validate_producer_id",
]

#: a version's field of TGB entries
ENTRIES = "entries"


def _check_format(f: Fields, accepted: tuple[str, ...] = (FORMAT,)) -> str:
    fmt = f.string("format")
    if fmt not in accepted:
        raise ManifestError(
            f"{f.what}: format {fmt!r} is not one of {list(accepted)} (written by another torch_tgb version? "
            "a newer one: upgrade torch_tgb to read it)"
        )
    return fmt


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
    namespace's first producer only (see :mod:`torch_tgb.manifest.jobs`);
    format 2 repeats it on every version.

    ``table``: format 2 (``None``: format 1). The version then also names
    the complete state of every producer through its producers' table
    (:class:`TableRef`), ``producers`` holds no pipeline state, and the
    entries are written as columns (:class:`EntryTable`).
    """

    number: int
    token: str
    first_step: int
    entries: Sequence[TGBEntry] = ()
    producers: Mapping[str, ProducerState] = field(default_factory=dict)
    sealed: bool = False
    time: float = 0.0
    job: JobSpec | None = None
    table: TableRef | None = None
    #: the replacements in effect (``_replaced.py``); format 2, from the first replacement version on
    replaced: ReplacedRef | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.entries, EntryTable):
            object.__setattr__(self, "entries", EntryTable.of(self.entries))

    @property
    def stop_step(self) -> int:
        """One past the last step this version adds."""
        return self.first_step + len(self.entries)

    @property
    def format(self) -> int:
        """1 or 2 (format 2 carries a producers' table)."""
        return 1 if self.table is None else 2

    def to_json(self) -> dict[str, Any]:
        entries = cast(EntryTable, self.entries)
        out: dict[str, Any] = {
            "format": FORMAT if self.table is None else FORMAT2,
            "version": self.number,
            "token": self.token,
            "first_step": self.first_step,
            "entries": [e.to_json() for e in entries] if self.table is None else entries.to_json(),
            "producers": {pid: s.to_json(pipeline=self.table is None) for pid, s in sorted(self.producers.items())},
            "sealed": self.sealed,
            "time": self.time,
        }
        if self.job is not None:  # written only when declared: other versions' bytes stay as they were
            out["job"] = self.job.to_json()
        if self.table is not None:
            out["table"] = self.table.to_json()
        if self.replaced is not None:
            out["replaced"] = self.replaced.to_json()
        return out

    def encode(self) -> bytes:
        return dump_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes, *, number: int, where: str = "") -> Version:
        """Parse and validate the bytes of ``_tgb/log/<number>``; errors name the version."""
        what = f"{where}manifest version={number}"
        # the entries are checked item by item to be flat objects of scalars: no depth walk over them
        f = Fields(load_json(data, what=what, flat=ENTRIES), what=what)
        fmt = _check_format(f, _FORMATS)
        stored = f.integer("version", minimum=1)
        if stored != number:
            raise ManifestError(f"{what}: object says version={stored}")
        token = f.string("token")
        if not TOKEN.match(token):
            raise ManifestError(f"{what}: malformed commit token {token[:80]!r}")
        first_step = f.integer("first_step")
        if fmt == FORMAT:
            entries: EntryTable = EntryTable.of(TGBEntry.from_json_list(f.array(ENTRIES), what=what))
        else:
            entries = EntryTable.from_json(f.mapping(ENTRIES), what=what)
        producers = producers_from_json(f.mapping("producers"), what=what)
        job = f.optional_mapping("job")
        table = f.optional_mapping("table")
        replaced = f.optional_mapping("replaced")
        if (fmt == FORMAT2) != (table is not None) or (replaced is not None and table is None):
            raise ManifestError(f"{what}: format {fmt!r} {'needs' if table is None else 'has no'} a producers' table")
        version = cls(number, token, first_step, entries, producers, f.boolean("sealed"), f.number("time"),
                      None if job is None else JobSpec.from_json(job, what=what),
                      None if table is None else TableRef.from_json(table, what=what),
                      None if replaced is None else ReplacedRef.from_json(replaced, what=what))
        f.done()
        if version.table is not None and any(s.state is not None or s.state_ref for s in producers.values()):
            raise ManifestError(f"{what}: a format-2 version carries no pipeline state")
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

    ``table``: at a format-2 version, its producers' table; ``producers`` is
    then read from the table's buckets when first asked for (the readers'
    hot path never asks: :class:`~torch_tgb.manifest.Manifest` supplies the
    loader), and a snapshot holds only the table.
    """

    version: int
    num_steps: int
    sealed: bool
    producers: Mapping[str, ProducerState]
    job: JobSpec | None = None
    table: TableRef | None = None
    replaced: ReplacedRef | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT if self.table is None else FORMAT2,
            "version": self.version,
            "num_steps": self.num_steps,
            "sealed": self.sealed,
        }
        if self.table is None:
            out["producers"] = {pid: s.to_json() for pid, s in sorted(self.producers.items())}
        else:
            out["table"] = self.table.to_json()
        if self.job is not None:
            out["job"] = self.job.to_json()
        if self.replaced is not None:
            out["replaced"] = self.replaced.to_json()
        return out

    def encode(self) -> bytes:
        return dump_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes, *, what: str) -> ManifestState:
        return cls.from_json(load_json(data, what=what), what=what)

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> ManifestState:
        f = Fields(obj, what=what)
        fmt = _check_format(f, _FORMATS)
        job = f.optional_mapping("job")
        number, num_steps, sealed = f.integer("version"), f.integer("num_steps"), f.boolean("sealed")
        spec = None if job is None else JobSpec.from_json(job, what=what)
        if fmt == FORMAT:
            state = cls(number, num_steps, sealed, producers_from_json(f.mapping("producers"), what=what), spec)
        else:
            table = TableRef.from_json(f.mapping("table"), what=what)
            replaced = f.optional_mapping("replaced")
            state = cls(number, num_steps, sealed, ProducerTable(table), spec, table,
                        None if replaced is None else ReplacedRef.from_json(replaced, what=what))
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
