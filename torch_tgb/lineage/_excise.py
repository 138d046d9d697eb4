"""``excise``: take records out of a live namespace, as new immutable objects published in one version.

1. **Find** every step holding a record (``Lineage.lookup``: the index, made
   complete up to the newest version).
2. **Objects**: the objects those steps' entries in effect name. An object
   is superseded whole, so that no byte of a record is left in it: every
   live step whose entry names it (a segment holds a producer's consecutive
   TGBs, ``_objects.py``) is rewritten, the ones without the records as they
   are.
3. **Rewrite** (``_rewrite.py``): each TGB decoded, its rows without the
   records (re-packed in place, ``transforms.excision``), cut again with the
   namespace's layout and written, per old object one new object
   ``data/tgb-excise/<token>.tgb`` (a segment with its index when it holds
   several). Steps, dp slices, rows and every other span stay as they were.
4. **Commit** one replacement version (``manifest/replace.py``) with the
   audit record of the excision. A step another excision replaced meanwhile
   is rewritten again from its new entry (the new objects of the lost
   attempt are deleted).
5. **Look again**: producers may have committed steps holding the records
   since the lookup; the excision repeats (one version each) until a lookup
   made after its last commit finds the records in no step.

Readers that open after the version read the cleaned bytes; what one that
is running sees, and when the old objects go, is in docs/provenance.md.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from torch_tgb.errors import ProvenanceError
from torch_tgb.format import V3_SLICE_ALIGN, encode_tgb, segment_index
from torch_tgb.layout import Layout
from torch_tgb.lineage._objects import object_steps
from torch_tgb.lineage._rewrite import rewrite
from torch_tgb.lineage.audit import ExcisionRecord, default_who, write_excision
from torch_tgb.lineage.query import Lineage
from torch_tgb.manifest import Manifest, TGBEntry
from torch_tgb.manifest.replace import Replacement, ReplacementConflict, commit_replacements, entries_in_effect
from torch_tgb.storage import ObjectStore
from torch_tgb.transforms.provenance import RecordId, record_hash

__all__ = ["EXCISE_PREFIX", "ExcisionReport", "excise"]

log = logging.getLogger(__name__)

#: where excisions write the objects that replace the ones they supersede
EXCISE_PREFIX = "data/tgb-excise/"
#: whole excisions retried after another excision replaced one of the steps meanwhile
_ATTEMPTS = 4
#: rounds of an excision under running producers (each one commits what the lookup before it found)
_ROUNDS = 8


@dataclass(frozen=True)
class ExcisionReport:
    """What an excision did (``version`` None: nothing held the records, nothing was committed)."""

    version: int | None
    records: list[str]
    not_found: list[str]
    steps: list[int]
    objects: list[str]
    replaced_steps: int
    spans: int
    tokens: int
    audit: str = ""
    seconds: float = 0.0
    dry_run: bool = False
    hits: list[list[int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def excise(
    ns: str | ObjectStore, records: Iterable[RecordId | str], *, who: str | None = None, reason: str = "",
    storage_options: Mapping[str, Any] | None = None, dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ExcisionReport:
    """Excise ``records`` (``SOURCE:UNIT:RECORD``) from namespace ``ns``; see the module docstring.

    ``who``/``reason`` go into the audit record (``who`` defaults to
    ``user@host``). ``dry_run``: find and report, write nothing.
    """
    started = time.monotonic()
    ids = sorted({RecordId.parse(r) if isinstance(r, str) else r for r in records})
    say = progress or (lambda text: log.info("%s", text))
    with Lineage(ns, storage_options=storage_options) as lineage:
        rounds: list[ExcisionReport] = []
        for _ in range(_ROUNDS):  # until a lookup after our last commit finds the records in no step
            report = _attempts(lineage, ids, who or default_who(), reason, dry_run, say, started)
            if report.version is None or dry_run:
                break
            rounds.append(report)
            say("looking again: steps committed meanwhile may hold the records too")
        else:
            raise ProvenanceError(f"{lineage.store.url}: producers keep committing steps that hold the records "
                                  f"after {_ROUNDS} excisions; take them out of the sources first, then excise again")
    return _joined(rounds, report, time.monotonic() - started)


def _attempts(lineage: Lineage, ids: list[RecordId], who: str, reason: str, dry_run: bool,
              say: Callable[[str], None], started: float) -> ExcisionReport:
    """One excision, made again from the new entries when another excision replaced some steps meanwhile."""
    for attempt in range(_ATTEMPTS):
        try:
            return _excise_once(lineage, ids, who, reason, dry_run, say, started)
        except ReplacementConflict as e:
            if attempt == _ATTEMPTS - 1:
                raise
            say(f"another excision replaced some of the steps meanwhile ({e}); rewriting them again")
    raise AssertionError("unreachable")  # pragma: no cover


def _joined(rounds: list[ExcisionReport], last: ExcisionReport, seconds: float) -> ExcisionReport:
    """One report of the rounds of an excision (the last round found nothing left, or was a dry run)."""
    if not rounds:
        return last
    first = rounds[0]
    return ExcisionReport(
        rounds[-1].version, first.records, first.not_found, sorted({s for r in rounds for s in r.steps}),
        sorted({o for r in rounds for o in r.objects}), sum(r.replaced_steps for r in rounds),
        sum(r.spans for r in rounds), sum(r.tokens for r in rounds), rounds[-1].audit, seconds, False,
        [h for r in rounds for h in r.hits],
    )


def _excise_once(lineage: Lineage, ids: list[RecordId], who: str, reason: str, dry_run: bool,
                 say: Callable[[str], None], started: float) -> ExcisionReport:
    store = lineage.store
    found = lineage.lookup(ids)
    not_found = [str(r) for r in ids if not found.steps(r)]
    steps = sorted({h.step for r in ids for h in found.hits[r] if not h.excised})
    say(f"{len(ids) - len(not_found)} of {len(ids)} record(s) found in {len(steps)} step(s)")
    if not steps:
        return ExcisionReport(None, [str(r) for r in ids], not_found, [], [], 0, 0, 0,
                              seconds=time.monotonic() - started, dry_run=dry_run)
    manifest = Manifest(store)
    head = manifest.head()
    boundary = manifest.gc_boundary()
    layout = lineage.layout()
    in_effect = entries_in_effect(manifest, steps)
    objects = _group(manifest, in_effect, head.version, boundary.step)
    deny = np.unique(record_hash(*np.array([lineage.resolve(r) for r in ids], dtype=np.int64).T)).astype(np.uint64)
    say(f"{len(objects)} object(s) to supersede, {sum(len(v) for v in objects.values())} step(s) to rewrite")
    if dry_run:
        return ExcisionReport(None, [str(r) for r in ids], not_found, steps, sorted(objects), 0, 0, 0,
                              seconds=time.monotonic() - started, dry_run=True)
    replacements: list[Replacement] = []
    written: list[str] = []
    hits: list[list[int]] = []
    spans = tokens = 0
    try:
        for old, tgbs in sorted(objects.items()):
            key = f"{EXCISE_PREFIX}{secrets.token_hex(8)}.tgb"
            rewritten = [(step, entry, rewrite(store, entry, layout, deny)) for step, entry in tgbs]
            new_entries = _write_object(store, key, [(e, r.slices) for _, e, r in rewritten])
            written.append(key)
            for (step, entry, r), new in zip(rewritten, new_entries):
                replacements.append(Replacement(step, new, base=entry.key))
                hits.extend([h, step] for h, _, _ in r.removed)
                spans += len(r.removed)
                tokens += r.tokens
        superseded = [(old, max(s for s, _ in tgbs)) for old, tgbs in objects.items()]
        record_of = _audit(store, ids, who, reason, steps, sorted(objects), spans, tokens, hits, written)
        version = commit_replacements(manifest, replacements, superseded, audit=record_of)
    except BaseException:
        if written:
            store.delete(written)  # named by no version: nobody reads them
        raise
    committed = manifest.read_version(version).replaced
    audit_key = committed.audit if committed is not None else ""
    say(f"committed replacement version {version}: {len(replacements)} step(s) rewritten, {spans} span(s) and "
        f"{tokens} token(s) removed")
    return ExcisionReport(version, [str(r) for r in ids], not_found, steps, sorted(objects), len(replacements),
                          spans, tokens, audit_key, time.monotonic() - started, False, hits)


def _group(manifest: Manifest, in_effect: Mapping[int, TGBEntry], head: int,
           boundary_step: int) -> dict[str, list[tuple[int, TGBEntry]]]:
    """Per object named by a step to rewrite: every live step whose entry in effect names it, in order."""
    out: dict[str, list[tuple[int, TGBEntry]]] = {}
    for step, entry in sorted(in_effect.items()):
        if entry.key in out:
            continue
        steps = object_steps(manifest, entry, step, head=head, boundary_step=boundary_step)
        effective = entries_in_effect(manifest, steps)
        out[entry.key] = [(s, effective[s]) for s in sorted(effective) if effective[s].key == entry.key]
    return out


def _write_object(store: ObjectStore, key: str, tgbs: list[tuple[TGBEntry, list[Any]]]) -> list[TGBEntry]:
    """Write the TGBs (old entry, new slices) as one object (a segment with its index for several); entries."""
    writer = store.open_writer(key)
    placed = []
    try:
        for old, slices in tgbs:
            end = writer.size
            base = end + (-end % V3_SLICE_ALIGN)
            buffers, obj = encode_tgb(slices, base=base, key=key)
            writer.write_at(base, buffers)
            placed.append((old, base, obj, bytes(buffers[-1])))
        if len(placed) > 1:
            writer.write_at(writer.size, [segment_index([(o.footer_offset, o.size) for _, _, o, _ in placed],
                                                        [f for _, _, _, f in placed])])
        total = writer.size
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    single = len(placed) == 1
    return [TGBEntry(key, o.size, o.footer_offset, o.footer_length, old.producer, old.offset, old.samples,
                     old.tokens, start=base, object_size=None if single else total, slice_record=o.slice_record)
            for old, base, o, _ in placed]


def _audit(store: ObjectStore, ids: list[RecordId], who: str, reason: str, steps: list[int], objects: list[str],
           spans: int, tokens: int, hits: list[list[int]], written: list[str]) -> Callable[[int, str, str], str]:
    """The audit writer ``commit_replacements`` calls for each attempt, right before its create: it first
    checks that the new objects are still there (a Reclaimer sweeps objects no version names once older than
    its grace period: an excision that ran longer must not publish what it deleted)."""

    def write(number: int, token: str, previous: str) -> str:
        gone = [k for k in written if not store.exists(k)]
        if gone:
            raise ProvenanceError(f"{store.url}: {len(gone)} object(s) this excision wrote are gone ({gone[0]}): "
                                  "a Reclaimer swept them while the excision ran longer than its grace period; "
                                  "run the excision again (or reclaim with a longer --grace-period meanwhile)")
        record = ExcisionRecord(number, who, time.time(), reason, [str(r) for r in ids], steps, objects, spans,
                                tokens, [[str(h), s] for h, s in hits], previous)
        return write_excision(store, record, token)

    return write
