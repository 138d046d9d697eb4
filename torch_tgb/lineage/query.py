"""``Lineage``: which steps hold a record, and what a step holds (the Python API of ``tgb lineage`` and
``tgb provenance``).

``lookup`` answers from the lineage index (``index.py``) and makes the
answer complete: a version up to the newest that neither the catalog nor a
delta holds (its committer died before writing its delta, or an older
writer) is read from its TGBs' provenance, and its delta is written then
(``repair=True``), so the next lookup reads it from the index. A hit names
the step, the dp slice and the row of the written layout, and whether an
excision took the record out of that step since (``excised``).

``provenance(step)`` reads the step's TGB in effect: per dp slice, per row,
the records its spans come from (``SOURCE:UNIT:RECORD``, start, length).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from torch_tgb.errors import ProvenanceError
from torch_tgb.layout import Layout
from torch_tgb.lineage._read import tgb_provenance
from torch_tgb.lineage._runs import ENTRY, split_row
from torch_tgb.lineage.audit import ExcisionRecord, read_excisions
from torch_tgb.lineage.capture import delta_of
from torch_tgb.lineage.index import IndexState, LineageIndex
from torch_tgb.lineage.sources import read_sources
from torch_tgb.manifest import Manifest, TGBEntry
from torch_tgb.storage import ObjectStore, open_store
from torch_tgb.transforms.provenance import RecordId, SourceInfo, record_hash, split_unit_key, unit_key, unpack_extent

__all__ = ["Hit", "Lineage", "LookupResult", "RowSpan", "StepProvenance"]


@dataclass(frozen=True, order=True)
class Hit:
    """A step that holds (or held) a record: the step, the dp slice and the row in it (of the written layout)."""

    step: int
    dp: int
    row: int
    excised: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "dp": self.dp, "row": self.row, "excised": self.excised}


@dataclass(frozen=True)
class LookupResult:
    """Hits per record asked for, and the manifest version the answer is complete up to."""

    hits: dict[RecordId, list[Hit]]
    version: int
    filled: list[int] = field(default_factory=list)  # versions read from the TGBs (no delta in the index)

    def steps(self, record: RecordId | str) -> list[int]:
        """The steps holding ``record`` now (excised ones left out), ascending, each once."""
        rid = RecordId.parse(record) if isinstance(record, str) else record
        return sorted({h.step for h in self.hits.get(rid, []) if not h.excised})

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "filled": self.filled,
                "records": {str(r): [h.to_json() for h in hits] for r, hits in sorted(self.hits.items())}}


@dataclass(frozen=True)
class RowSpan:
    """One span of a row: ``length`` tokens of ``record`` from token ``start``."""

    record: RecordId
    start: int
    length: int

    def to_json(self) -> dict[str, Any]:
        return {"record": str(self.record), "start": self.start, "length": self.length}


@dataclass(frozen=True)
class StepProvenance:
    """What a step holds: per dp slice, per row, its spans."""

    step: int
    key: str
    slices: dict[int, list[list[RowSpan]]]

    def records(self) -> set[RecordId]:
        return {s.record for rows in self.slices.values() for row in rows for s in row}

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "object": self.key,
                "slices": {str(d): [[s.to_json() for s in row] for row in rows] for d, rows in self.slices.items()}}


class Lineage:
    """Provenance queries over one namespace (``ns``: a URL or an open store)."""

    def __init__(self, ns: str | ObjectStore, *, storage_options: Mapping[str, Any] | None = None,
                 repair: bool = True) -> None:
        self._owns = not isinstance(ns, ObjectStore)
        self.store = open_store(ns, storage_options)
        self.manifest = Manifest(self.store)
        self.index = LineageIndex(self.store, where=f"{self.store.url}: ")
        self.repair = repair
        self._sources: dict[int, SourceInfo] | None = None
        self._layout: Layout | None = None

    def close(self) -> None:
        if self._owns:
            self.store.close()

    def __enter__(self) -> Lineage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- names ---------------------------------------------------------------

    def sources(self) -> dict[int, SourceInfo]:
        """The sources recorded in the namespace, by id (read once)."""
        if self._sources is None:
            self._sources = read_sources(self.store)
        return self._sources

    def resolve(self, record: RecordId | str) -> tuple[int, int]:
        """``(unit key, record)`` of a record named ``SOURCE:UNIT:RECORD``; ProvenanceError if no source has it."""
        rid = RecordId.parse(record) if isinstance(record, str) else record
        matches = [(sid, info) for sid, info in self.sources().items() if info.name == rid.source]
        if not matches:
            names = sorted({i.name for i in self.sources().values()})
            raise ProvenanceError(f"{self.store.url}: no source named {rid.source!r} (sources: {names})")
        problems = []
        for sid, info in matches:
            try:
                return unit_key(sid, info.unit_index(rid.unit)), rid.record
            except ValueError as e:
                problems.append(str(e))
        raise ProvenanceError(f"{self.store.url}: {rid}: {'; '.join(problems)}")

    def name(self, unit: int, record: int) -> RecordId:
        """The ``SOURCE:UNIT:RECORD`` name of a span's ``(unit key, record)``."""
        sid, index = split_unit_key(unit)
        info = self.sources().get(int(sid))
        if info is None:
            return RecordId(f"source-{int(sid):08x}", str(int(index)), int(record))
        return RecordId(info.name, info.units[int(index)] if int(index) < len(info.units) else str(index), int(record))

    def layout(self) -> Layout:
        if self._layout is None:
            info = self.manifest.dataset()
            if info is None:
                raise ProvenanceError(f"{self.store.url}: no dataset.json: nothing was produced here")
            self._layout = Layout.from_json(info.layout)
        return self._layout

    # --- which steps hold a record -------------------------------------------

    def lookup(self, records: Iterable[RecordId | str]) -> LookupResult:
        """The steps (dp slice, row) holding each record, complete up to the newest version."""
        ids = [RecordId.parse(r) if isinstance(r, str) else r for r in records]
        pairs = [self.resolve(r) for r in ids]
        hashes = record_hash(np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs]))
        head = self.manifest.latest_version()
        entries, state = self.index.lookup(hashes)
        filled = state.missing(head)
        if filled:
            entries = np.concatenate([entries, self._fill(filled, np.unique(hashes))])
        by_hash: dict[int, list[RecordId]] = {}
        for rid, h in zip(ids, hashes.tolist()):
            by_hash.setdefault(h, []).append(rid)
        excised = self._excised(head)
        hits: dict[RecordId, list[Hit]] = {rid: [] for rid in ids}
        for e in np.sort(entries, order=["step", "row"]).tolist():
            h, step = int(e[0]), int(e[1])
            dp, row = split_row(int(e[2]))
            for rid in by_hash.get(h, []):
                hits[rid].append(Hit(step, dp, row, (h, step) in excised))
        return LookupResult({r: sorted(set(v)) for r, v in hits.items()}, head, filled)

    def _fill(self, versions: list[int], wanted: np.ndarray) -> np.ndarray:
        """Entries matching ``wanted`` of ``versions`` (not in the index), read from their TGBs."""
        found = [entries[np.isin(entries["h"], wanted)] for entries, _ in self.fill(versions).values()]
        return np.concatenate(found) if found else np.zeros(0, dtype=ENTRY)

    def fill(self, versions: list[int]) -> dict[int, tuple[np.ndarray, dict[str, Any]]]:
        """The deltas of ``versions`` (versions the index lacks), read from their TGBs; written back with
        ``repair`` (so the next lookup finds them in the index)."""
        out = {}
        for number in versions:
            version = self.manifest.try_read_version(number)
            if version is None:
                continue  # reclaimed since the head was read
            steps = []
            for i, entry in enumerate(version.entries):
                got = self._original_provenance(version.first_step + i, entry)
                if got is not None:
                    steps.append((version.first_step + i, *got))
            entries, summary = delta_of(number, steps, self.layout().dp)
            if self.repair:
                self.index.write_delta(number, entries, summary)
            out[number] = (entries, summary)
        return out

    def _original_provenance(self, step: int, entry: TGBEntry) -> tuple[np.ndarray, np.ndarray] | None:
        """The provenance of a step as committed (its original TGB; the one in effect if that was reclaimed)."""
        from torch_tgb.errors import ObjectNotFound

        try:
            return tgb_provenance(self.store, entry)
        except ObjectNotFound:
            return tgb_provenance(self.store, self.manifest.entry(step))

    def _excised(self, head: int) -> set[tuple[int, int]]:
        """``(record hash, step)`` pairs an excision took out (from the excisions' audit records)."""
        version = self.manifest.read_version(head) if head else None
        if version is None or version.replaced is None:
            return set()
        out: set[tuple[int, int]] = set()
        for record in read_excisions(self.store):
            out.update(record.pairs())
        return out

    def excisions(self) -> list[ExcisionRecord]:
        """The audit records of every excision in the namespace, oldest first."""
        return read_excisions(self.store)

    # --- what a step holds -----------------------------------------------------

    def provenance(self, step: int, *, rank: int | None = None) -> StepProvenance:
        """The records of step ``step``'s rows (of dp slice ``rank`` only, if given), in the TGB in effect."""
        entry = self.manifest.entry(step)
        layout = self.layout()
        if rank is not None and not 0 <= rank < layout.dp:
            raise ValueError(f"{self.store.url}: rank={rank}: the namespace is written for dp={layout.dp}")
        dps = list(range(layout.dp)) if rank is None else [rank]
        got = tgb_provenance(self.store, entry, dps=dps)
        if got is None:
            raise ProvenanceError(f"{self.store.url}: step {step} carries no provenance (written without it)")
        values, offsets = got
        per = (len(offsets) - 1) // len(dps)
        starts, lengths = unpack_extent(values[:, 2]) if len(values) else (values[:, 2], values[:, 2])
        names = [self.name(int(u), int(r)) for u, r in zip(values[:, 0].tolist(), values[:, 1].tolist())]
        slices: dict[int, list[list[RowSpan]]] = {}
        for k, dp in enumerate(dps):
            rows = []
            for r in range(k * per, (k + 1) * per):
                a, b = int(offsets[r]), int(offsets[r + 1])
                rows.append([RowSpan(names[i], int(starts[i]), int(lengths[i])) for i in range(a, b)])
            slices[dp] = rows
        return StepProvenance(step, entry.key, slices)

    def index_state(self) -> IndexState:
        return self.index.state()


