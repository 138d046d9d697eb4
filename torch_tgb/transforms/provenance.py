"""Provenance of packed rows: which record of which source each span of a row came from. Pure.

A *record* is named ``SOURCE:UNIT:RECORD``: the source's name, one of its
units (a token file, a Parquet file, a tar shard, a Lance fragment, a video
file, an episode) and the record's index in it (a document, a row, a sample,
a frame). Inside a TGB every span of a row (a piece of one record, what
``seq_lens`` counts) carries three int64 numbers, the ragged key
:data:`PROVENANCE_KEY` ``[spans, 3]`` of a row:

- ``unit``: ``source_id << 32 | unit index`` (:func:`unit_key`). The
  ``source_id`` is a 31-bit digest of the source's description
  (:func:`source_id_of`: its name, kind and unit names), kept once per
  namespace (``lineage``'s source records), so names are never repeated in
  rows;
- ``record``: the record's index in its unit;
- ``extent``: where the span starts in the record and how long it is, as
  ``start << 24 | length`` (:func:`pack_extent`): a record split over rows
  is several spans, each with its own start; the length lets a span be
  found in its row without the row's ``seq_lens`` (concat-and-chunk rows
  hold several records in one sequence).

24 bytes a span plus the row's 8-byte offset: about 26 bytes a document in a
row of a BFD-packed corpus (``docs/provenance.md`` measures it).

Rows of samples (``PackSamples``: images, clips, robot steps) also carry
:data:`COUNTS_KEY` ``[samples, K]`` int32: how many entries each sample put
in each of the row's K media keys (:func:`media_keys`: the ragged keys
other than provenance and ``sample_keys``, by name), so that an excision
can take a sample's pixels, grids and states out with its tokens.

:func:`record_hash` maps ``(unit, record)`` to the 64-bit key the lineage
index sorts by; :func:`span_provenance` turns a window's document ids and its
packed spans into the rows' provenance.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from torch_tgb.transforms.sample_keys import SAMPLE_KEYS

__all__ = [
    "COUNTS_KEY",
    "DOC_PROVENANCE",
    "PROVENANCE_KEY",
    "PROVENANCE_KEYS",
    "PROVENANCE_WIDTH",
    "RecordId",
    "SourceInfo",
    "doc_ids",
    "media_keys",
    "pack_extent",
    "record_hash",
    "source_id_of",
    "span_provenance",
    "split_unit_key",
    "unit_key",
    "unpack_extent",
]

#: the ragged key of a row's provenance (int64 ``[spans, 3]``: unit key, record, extent)
PROVENANCE_KEY = "provenance"
#: the ragged key of a sample row's entries per sample and media key (int32 ``[samples, K]``, :func:`media_keys`)
COUNTS_KEY = "provenance_counts"
#: the keys a trainer's default batch leaves out (what it trains on is the rest)
PROVENANCE_KEYS = frozenset({PROVENANCE_KEY, COUNTS_KEY})
#: a document dict's id: ``(unit key, record, start in the record)``, as sources yield it
DOC_PROVENANCE = "__provenance__"
#: the columns of one span's provenance
PROVENANCE_WIDTH = 3
#: how many units a source may name (the unit index is the low 32 bits of a unit key)
MAX_UNITS = 1 << 32
_SOURCE_BITS = 31
#: bits of a span's length in its extent (a span is at most a row: 16 Mi tokens)
LENGTH_BITS = 24
MAX_SPAN = (1 << LENGTH_BITS) - 1


def media_keys(ragged: Iterable[str]) -> tuple[str, ...]:
    """The columns of :data:`COUNTS_KEY`: the ragged keys of sample rows other than provenance, its counts and
    ``sample_keys`` (one entry per sample already), sorted by name."""
    return tuple(sorted(k for k in ragged if k not in PROVENANCE_KEYS and k != SAMPLE_KEYS))


def unit_key(source_id: int, unit: int) -> int:
    """``source_id << 32 | unit``: a unit of a source as one non-negative int64."""
    if not 0 <= source_id < 1 << _SOURCE_BITS or not 0 <= unit < MAX_UNITS:
        raise ValueError(f"source_id={source_id} must be in [0, 2**31) and unit={unit} in [0, 2**32)")
    return source_id << 32 | unit


def split_unit_key(key: int | np.ndarray) -> tuple[int | np.ndarray, int | np.ndarray]:
    """``(source_id, unit)`` of unit key(s)."""
    if isinstance(key, np.ndarray):
        return key >> 32, key & 0xFFFFFFFF
    return int(key) >> 32, int(key) & 0xFFFFFFFF


@dataclass(frozen=True)
class SourceInfo:
    """What names a source's records: its ``name``, ``kind`` and unit names (unit ``i`` is ``units[i]``)."""

    name: str
    kind: str
    units: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"a source name must be non-empty, without ':' or whitespace, got {self.name!r}")
        if len(self.units) > MAX_UNITS:
            raise ValueError(f"source {self.name!r}: {len(self.units)} units, at most {MAX_UNITS}")
        object.__setattr__(self, "units", tuple(str(u) for u in self.units))

    @property
    def source_id(self) -> int:
        return source_id_of(self)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "units": list(self.units)}

    def unit_index(self, unit: str) -> int:
        """The index of unit ``unit`` (its name, or its index as a decimal string); ValueError if none."""
        try:
            return self.units.index(unit)
        except ValueError:
            pass
        if unit.isdigit() and int(unit) < len(self.units):
            return int(unit)
        matches = [i for i, u in enumerate(self.units) if u.rsplit("/", 1)[-1] == unit]
        if len(matches) == 1:  # a base name that names one unit
            return matches[0]
        raise ValueError(f"source {self.name!r} has no unit {unit!r} (units: {list(self.units[:5])}"
                         f"{' ...' if len(self.units) > 5 else ''})")


def source_id_of(info: SourceInfo) -> int:
    """The 31-bit id of a source: a digest of its name, kind and unit names (stable across processes and runs)."""
    data = json.dumps(info.to_json(), sort_keys=True, separators=(",", ":")).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:4], "big") >> 1


@dataclass(frozen=True, order=True)
class RecordId:
    """``SOURCE:UNIT:RECORD``: a record of a named source (unit by name or index, record by index)."""

    source: str
    unit: str
    record: int

    @classmethod
    def parse(cls, text: str) -> RecordId:
        """Parse ``SOURCE:UNIT:RECORD`` (the unit may itself hold ``:``, as a URL does)."""
        text = text.strip()
        head, sep, record = text.rpartition(":")
        source, sep2, unit = head.partition(":")
        if not sep or not sep2 or not source or not unit or not record.isdigit():
            raise ValueError(f"a record is SOURCE:UNIT:RECORD with RECORD a non-negative integer, got {text!r}")
        return cls(source, unit, int(record))

    def __str__(self) -> str:
        return f"{self.source}:{self.unit}:{self.record}"


def record_hash(units: np.ndarray | int, records: np.ndarray | int) -> np.ndarray:
    """The 64-bit lineage key of ``(unit key, record)`` pairs (splitmix64 of both): uint64, vectorised."""
    u = np.asarray(units, dtype=np.int64).astype(np.uint64)
    r = np.asarray(records, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        return _mix(_mix(u) ^ r)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (wrapping uint64 arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def pack_extent(start: np.ndarray | int, length: Sequence[int] | np.ndarray | int) -> np.ndarray:
    """``start << 24 | length`` (int64): a span's place in its record, as one number."""
    start = np.asarray(start, dtype=np.int64)
    length = np.asarray(length, dtype=np.int64)
    if ((length >> LENGTH_BITS) | (start >> (63 - LENGTH_BITS))).any():  # one pass: a negative shifts to -1
        if length.size and (int(length.min()) < 0 or int(length.max()) > MAX_SPAN):
            raise ValueError(f"a span holds 0..{MAX_SPAN} tokens, got {int(length.max())}")
        raise ValueError(f"a span starts at 0..2**{63 - LENGTH_BITS} tokens into its record")
    out: np.ndarray = (start << LENGTH_BITS) | length
    return out


def unpack_extent(extent: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """``(start, length)`` of extents (:func:`pack_extent`)."""
    e = np.asarray(extent, dtype=np.int64)
    return e >> LENGTH_BITS, e & MAX_SPAN


def doc_ids(unit_keys: np.ndarray | int, records: np.ndarray, starts: np.ndarray | int = 0) -> np.ndarray:
    """Documents' ids as int64 ``[n, 3]``: unit key, record, and the document's start in the record (tokens).

    The third column is a *start* here (a document read in pieces starts
    inside its record); :func:`span_provenance` turns it into a span's extent.
    """
    records = np.asarray(records, dtype=np.int64).reshape(-1)
    out = np.empty((len(records), PROVENANCE_WIDTH), dtype=np.int64)
    out[:, 0] = unit_keys
    out[:, 1] = records
    out[:, 2] = starts
    return out


def span_provenance(ids: np.ndarray, doc: np.ndarray, start: Sequence[int] | np.ndarray,
                    length: Sequence[int] | np.ndarray) -> np.ndarray:
    """The provenance ``[spans, 3]`` of spans ``(doc[i], start[i], length[i])`` of documents with ids ``ids``.

    A span's start in its record is its document's start (a piece of a record
    read in pieces starts inside the record) plus the span's start in the
    document; its extent packs that start and its length.
    """
    out = np.asarray(ids, dtype=np.int64)[np.asarray(doc, dtype=np.int64)]
    out[:, 2] = pack_extent(out[:, 2] + np.asarray(start, dtype=np.int64), length)
    return out
