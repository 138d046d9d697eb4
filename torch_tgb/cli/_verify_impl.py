"""The body of ``tgb verify``: check a namespace end to end, report problems by version/step.

Checks, in order:

1. ``dataset.json`` parses; the log versions from the GC boundary to the
   newest exist without holes and parse (which also checks that every key
   lies inside ``data/`` of the namespace and offsets are consecutive).
2. The step sequence: each version's ``first_step`` equals the previous
   version's end; a producer's offsets continue where its previous version
   ended; epochs never decrease; nothing is appended after a seal; every
   snapshot agrees with the replayed log.
3. Every referenced object exists with the recorded size, its footer parses
   at the recorded location with the namespace's dp/cp, and (unless
   ``crc=False``) every tensor of every slice matches its CRC32C and every
   padding byte is zero (padding is covered by no CRC).
4. Watermarks parse and no live checkpoint points below the GC boundary.

Objects under ``data/`` that no kept version references are counted as
"unreferenced" (uncommitted orphans, or reclaimable), and writes started and
never finished (a killed writer's temp file or open multipart upload) as
"partial writes", with how to reclaim them: information, not a problem.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from torch_tgb import storage
from torch_tgb.cli._common import human_bytes, plural
from torch_tgb.errors import TGBError
from torch_tgb.manifest import DATASET_KEY, LOG_PREFIX, SNAPSHOT_PREFIX, Manifest

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from torch_tgb.format import SegmentIndex
    from torch_tgb.manifest import GCBoundary, ManifestState, TGBEntry, Version
    from torch_tgb.manifest.keys import KeyLayout
    from torch_tgb.storage import ObjectStore

__all__ = ["Problem", "VerifyReport", "verify_namespace"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong, located as precisely as known."""

    message: str
    version: int | None = None
    step: int | None = None
    key: str | None = None

    def render(self) -> str:
        where = []
        if self.version is not None:
            where.append(f"version={self.version}")
        if self.step is not None:
            where.append(f"step={self.step}")
        if self.key is not None:
            where.append(f"key={self.key!r}")
        return f"[{' '.join(where) or 'namespace'}] {self.message}"


@dataclass
class VerifyReport:
    namespace: str
    versions_checked: int = 0
    steps_checked: int = 0
    objects_checked: int = 0
    bytes_checked: int = 0
    crc_checked: bool = True
    unreferenced_objects: int = 0
    unreferenced_bytes: int = 0
    #: writes never finished (``inspect``'s ``partial_writes``: count, bytes, dead, live, live_producers)
    partial_writes: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out

    def render_text(self) -> str:
        how = "CRC32C checked" if self.crc_checked else "sizes and footers only"
        lines = [
            f"verify {self.namespace}: {'OK' if self.ok else f'{len(self.problems)} problem(s)'}",
            f"  {plural(self.versions_checked, 'version')}, {plural(self.steps_checked, 'step')} "
            f"({plural(self.steps_checked, 'TGB')} in {plural(self.objects_checked, 'object')}, "
            f"{human_bytes(self.bytes_checked)}, {how})",
        ]
        if self.unreferenced_objects:
            lines.append(
                f"  unreferenced objects under data/: {self.unreferenced_objects} "
                f"({human_bytes(self.unreferenced_bytes)}; uncommitted or reclaimable, see `tgb reclaim`)"
            )
        if self.partial_writes.get("count"):
            from torch_tgb.cli._inspect_impl import partial_writes_text

            lines.append(f"  partial writes: {partial_writes_text(self.namespace, self.partial_writes)}")
        lines += [f"  {p.render()}" for p in self.problems]
        if self.truncated:
            lines.append("  (stopped after --max-problems problems)")
        return "\n".join(lines)


class _TooMany(Exception):
    pass


class _Where(TypedDict, total=False):
    """Where a problem is: the fields of :class:`Problem` besides its message."""

    version: int
    step: int
    key: str


class _Report(Protocol):
    """Records one problem (and stops the check once there are ``max_problems``)."""

    def __call__(self, message: str, **where: Unpack[_Where]) -> None: ...


def verify_namespace(
    ns: str, *, storage_options: dict[str, Any] | None = None, crc: bool = True, max_problems: int = 100
) -> VerifyReport:
    """Check ``ns``; never raises for a problem it can name, returns them in the report."""
    store = storage.open_store(ns, storage_options)
    report = VerifyReport(namespace=store.url, crc_checked=crc)

    def problem(message: str, **where: Unpack[_Where]) -> None:
        report.problems.append(Problem(message, **where))
        if len(report.problems) >= max_problems:
            report.truncated = True
            raise _TooMany

    try:
        try:
            _verify(store, report, problem, crc=crc)
        except _TooMany:
            pass
        except TGBError as e:  # something unreadable at namespace level: a problem, not a crash
            report.problems.append(Problem(f"{type(e).__name__}: {e}"))
    finally:
        store.close()
    return report


def _verify(store: ObjectStore, report: VerifyReport, problem: _Report, *, crc: bool) -> None:
    store.check_root()  # a missing bucket is named as such (the caller reports it), not an empty namespace
    manifest = Manifest(store)
    dataset = None
    try:
        dataset = manifest.dataset()
    except TGBError as e:
        problem(f"{DATASET_KEY} is unreadable: {e}", key=DATASET_KEY)
    latest = manifest.latest_version()
    boundary = manifest.gc_boundary()
    if dataset is None and latest == 0:
        problem(f"no TGB namespace here (no {DATASET_KEY}, no log versions)")
        return
    if dataset is None and latest > 0:
        problem(f"{DATASET_KEY} is missing but {latest} versions exist", key=DATASET_KEY)
    layout = dict(dataset.layout) if dataset is not None else {}

    entries = _check_log(store, manifest, report, problem, latest=latest, boundary=boundary)
    if entries is None:
        return
    _check_objects(store, entries, report, problem, crc=crc, boundary_step=boundary.step, layout=layout)
    _check_watermarks(store, problem, boundary_step=boundary.step)
    referenced = {entry.key for _, _, entry in entries}
    for key in store.list("data/"):
        if key not in referenced:
            try:
                size = store.size(key)
            except TGBError:
                continue  # deleted since the listing
            report.unreferenced_objects += 1
            report.unreferenced_bytes += size
    from torch_tgb.cli._inspect_impl import partial_writes

    try:
        head: ManifestState | None = manifest.head()
    except TGBError:  # reported above; the partial writes are counted, not judged
        head = None
    report.partial_writes = partial_writes(store, head)


def _check_log(
    store: ObjectStore, manifest: Manifest, report: VerifyReport, problem: _Report, *, latest: int,
    boundary: GCBoundary,
) -> list[tuple[int, int, TGBEntry]] | None:
    """Steps 1 and 2: the kept log versions, replayed from the GC boundary's snapshot.

    Returns every kept entry as ``(version, step, entry)``, or ``None`` when
    the log cannot be replayed at all.
    """
    keys = manifest.key_layout()
    for number in sorted(n for n in _numbers(store, LOG_PREFIX, keys) if n > latest):
        problem(f"log object exists beyond the newest contiguous version {latest} (a hole before it?)", version=number)
    base = None
    producers: dict[str, tuple[int, int]] = {}  # producer → (epoch, next_offset) after the last version read
    if boundary.version > 0:
        base = manifest.read_snapshot(boundary.version)
        if base is None:
            problem("snapshot of the GC boundary version is missing", version=boundary.version)
            return None
        producers = {pid: (s.epoch, s.next_offset) for pid, s in base.producers.items()}
    expected_first: int | None = 0 if base is None else None
    sealed_at: int | None = None
    snapshots = _numbers(store, SNAPSHOT_PREFIX, keys)
    entries: list[tuple[int, int, TGBEntry]] = []
    newest: Version | None = None  # the newest version read: its replacements are the ones in effect
    for number in range(max(1, boundary.version), latest + 1):
        try:
            version = manifest.read_version(number)
        except TGBError as e:
            problem(f"unreadable: {e}", version=number, key=keys.version_key(number))
            expected_first = None  # the next version's first_step cannot be checked
            continue
        report.versions_checked += 1
        newest = version
        entries += [(number, version.first_step + i, entry) for i, entry in enumerate(version.entries)]
        if base is not None and number == boundary.version:
            # the boundary snapshot is the state *after* this version: its producers are already folded in
            if version.stop_step != base.num_steps:
                problem(
                    f"snapshot says num_steps={base.num_steps} but the version ends at step {version.stop_step}",
                    version=number,
                )
            sealed_at = number if base.sealed else None
            expected_first = version.stop_step
            continue
        if expected_first is not None and version.first_step != expected_first:
            problem(f"first_step={version.first_step}, expected {expected_first}", version=number)
        expected_first = version.stop_step
        if sealed_at is not None and version.entries:
            problem(f"appends {len(version.entries)} entries after the seal at version {sealed_at}", version=number)
        if version.sealed and sealed_at is None:
            sealed_at = number
        _check_producers(version, producers, problem)
        if number in snapshots:
            _check_snapshot(manifest.read_snapshot(number), version, producers, sealed_at, problem)
    replaced = newest.replaced if entries and newest is not None else None
    if replaced is not None:  # the entries in effect: a step an excision replaced is read from its new object
        swapped = manifest.replacements.apply(replaced, entries[0][1], [e for _, _, e in entries])
        entries = [(n, step, e) for (n, step, _), e in zip(entries, swapped)]
    return entries


def _check_producers(version: Version, producers: dict[str, tuple[int, int]], problem: _Report) -> None:
    """Epochs never go back; a producer's entries continue at its previous ``next_offset``."""
    first_step: dict[str, tuple[int, int]] = {}  # producer → (offset, step) of its first entry here
    for i, entry in enumerate(version.entries):
        first_step.setdefault(entry.producer, (entry.offset, version.first_step + i))
    for pid, state in version.producers.items():
        before = producers.get(pid)
        if before is not None:
            epoch, next_offset = before
            if state.epoch < epoch:
                problem(f"producer {pid!r} epoch went back from {epoch} to {state.epoch}", version=version.number)
            if pid in first_step and first_step[pid][0] != next_offset:
                offset, step = first_step[pid]
                problem(
                    f"producer {pid!r} continues at offset={offset}, its previous state said next_offset={next_offset}",
                    version=version.number,
                    step=step,
                )
        producers[pid] = (state.epoch, state.next_offset)
    for pid in first_step:
        if pid not in version.producers:
            problem(f"entries of producer {pid!r} without its producer state", version=version.number)


def _check_snapshot(
    snap: ManifestState | None, version: Version, producers: dict[str, tuple[int, int]], sealed_at: int | None,
    problem: _Report,
) -> None:
    if snap is None:
        return  # deleted since the listing
    sealed = sealed_at is not None
    if snap.num_steps != version.stop_step or bool(snap.sealed) != sealed:
        problem(
            f"snapshot disagrees with the log: num_steps={snap.num_steps} sealed={snap.sealed}, "
            f"log says num_steps={version.stop_step} sealed={sealed}",
            version=version.number,
        )
    for pid, state in snap.producers.items():
        if producers.get(pid) != (state.epoch, state.next_offset):
            problem(
                f"snapshot producer {pid!r} at epoch={state.epoch} next_offset={state.next_offset}, "
                f"log says (epoch, next_offset)={producers.get(pid)}",
                version=version.number,
            )


def _check_objects(
    store: ObjectStore,
    entries: list[tuple[int, int, TGBEntry]],
    report: VerifyReport,
    problem: _Report,
    *,
    crc: bool,
    boundary_step: int,
    layout: dict[str, Any],
) -> None:
    """Step 3: every referenced object exists with its size, footer and (optionally) CRCs."""
    from torch_tgb._progress import progress
    from torch_tgb.format import check_padding, decode_slice, read_footer, read_segment_index

    want_dp, want_cp = layout.get("dp"), layout.get("cp", 1)
    indexes: dict[str, SegmentIndex | None] = {}  # segment object -> its index (None: written without one)
    objects: set[str] = set()  # the objects (files) seen: a segment holds many TGBs
    for number, step, entry in progress(entries, desc="verify", unit="step"):
        if step < boundary_step:
            continue  # reclaimed steps of the kept boundary version: their objects may be gone
        report.steps_checked += 1
        where: _Where = {"version": number, "step": step, "key": entry.key}
        try:
            info = store.stat(entry.key)
        except TGBError as e:
            problem(f"object missing or unreadable: {e}", **where)
            continue
        if entry.key not in objects:
            objects.add(entry.key)
            report.objects_checked += 1
        if info.size != entry.total_size:
            problem(f"size {info.size} bytes, the manifest says {entry.total_size}", **where)
            continue
        try:
            footer = read_footer(
                store, entry.key, size=entry.size, footer_offset=entry.footer_offset, footer_length=entry.footer_length
            )
            if want_dp is not None and (footer.dp, footer.cp) != (want_dp, want_cp):
                problem(
                    f"object has dp={footer.dp} cp={footer.cp}, the namespace layout says dp={want_dp} cp={want_cp}",
                    **where,
                )
            slices = footer.slices()
            if entry.object_size is not None:  # a segment: its index must repeat this footer exactly
                if entry.key not in indexes:
                    indexes[entry.key] = None  # a bad index is reported once, at the segment's first step
                    try:
                        indexes[entry.key] = read_segment_index(store, entry.key, entry.total_size)
                    except TGBError as e:
                        problem(f"segment index: {type(e).__name__}: {e}", **where)
                index = indexes[entry.key]
                indexed = None if index is None else index.footer(entry.footer_offset, entry.size)
                if index is not None and (indexed is None or indexed.slices() != slices):
                    problem("the segment index does not repeat this TGB's footer", **where)
            if not crc:
                report.bytes_checked += entry.footer_length
                continue
            data = store.get_range(entry.key, entry.start, entry.size)  # this TGB's share of a segment
            report.bytes_checked += len(data)
            with warnings.catch_warnings():
                # tensors viewing read-only bytes: fine here, they are only checked, never written
                warnings.simplefilter("ignore", UserWarning)
                for s in slices:
                    decode_slice(data, s, base_offset=entry.start, verify=True, key=entry.key)
            check_padding(data, footer, key=entry.key, base=entry.start)  # padding has no CRC: it must be zeros
        except TGBError as e:
            problem(f"{type(e).__name__}: {e}", **where)


def _check_watermarks(store: ObjectStore, problem: _Report, *, boundary_step: int) -> None:
    """Step 4: watermarks parse; no live checkpoint resumes below the GC boundary."""
    from torch_tgb.manifest.watermarks import read_watermarks, retired_ids

    try:
        marks = read_watermarks(store)
        retired = retired_ids(store)
    except TGBError as e:
        problem(f"watermarks unreadable: {e}")
        return
    for mark in marks:
        if mark.checkpoint_id not in retired and mark.step < boundary_step:
            problem(
                f"live checkpoint {mark.checkpoint_id!r} resumes at step {mark.step}, below the GC boundary "
                f"step {boundary_step}: its data was reclaimed",
                step=mark.step,
            )


def _numbers(store: ObjectStore, prefix: str, keys: KeyLayout) -> set[int]:
    """Version numbers of the versions (``prefix``: the log) or snapshots (their parts too) listed (one LIST)."""
    listed = store.list(prefix)
    if prefix == LOG_PREFIX:
        return {n for k in listed if (n := keys.version_of(k)) is not None}
    return {s[0] for k in listed if (s := keys.snapshot_of(k)) is not None}
