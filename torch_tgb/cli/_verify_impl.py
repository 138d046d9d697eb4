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
   ``crc=False``) every tensor of every slice matches its CRC32C.
4. Watermarks parse and no live checkpoint points below the GC boundary.

Objects under ``data/`` that no kept version references are counted as
"unreferenced" (uncommitted orphans, or reclaimable): information, not a problem.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from torch_tgb.cli._common import human_bytes, require
from torch_tgb.errors import TGBError

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
        lines = [
            f"verify {self.namespace}: {'OK' if self.ok else f'{len(self.problems)} problem(s)'}",
            f"  versions {self.versions_checked}, steps {self.steps_checked}, objects {self.objects_checked} "
            f"({human_bytes(self.bytes_checked)}{', CRC32C checked' if self.crc_checked else ', sizes and footers only'})",
        ]
        if self.unreferenced_objects:
            lines.append(
                f"  unreferenced objects under data/: {self.unreferenced_objects} "
                f"({human_bytes(self.unreferenced_bytes)}; uncommitted or reclaimable, see `tgb reclaim`)"
            )
        lines += [f"  {p.render()}" for p in self.problems]
        if self.truncated:
            lines.append("  (stopped after --max-problems problems)")
        return "\n".join(lines)


class _TooMany(Exception):
    pass


def verify_namespace(
    ns: str, *, storage_options: dict[str, Any] | None = None, crc: bool = True, max_problems: int = 100
) -> VerifyReport:
    """Check ``ns``; never raises for a problem it can name, returns them in the report."""
    storage = require("torch_tgb.storage", command="verify")
    manifest_mod = require("torch_tgb.manifest", command="verify")
    store = storage.open_store(ns, storage_options)
    report = VerifyReport(namespace=store.url, crc_checked=crc)

    def problem(message: str, **where: Any) -> None:
        report.problems.append(Problem(message, **where))
        if len(report.problems) >= max_problems:
            report.truncated = True
            raise _TooMany

    try:
        try:
            _verify(store, manifest_mod, report, problem, crc=crc)
        except _TooMany:
            pass
        except TGBError as e:  # something unreadable at namespace level: a problem, not a crash
            report.problems.append(Problem(f"{type(e).__name__}: {e}"))
    finally:
        store.close()
    return report


def _verify(store: Any, m: Any, report: VerifyReport, problem: Any, *, crc: bool) -> None:
    from torch_tgb._progress import progress
    from torch_tgb.checkpoint.watermarks import read_watermarks, retired_ids
    from torch_tgb.format import decode_slice, read_footer

    manifest = m.Manifest(store)
    dataset = None
    try:
        dataset = manifest.dataset()
    except TGBError as e:
        problem(f"{m.DATASET_KEY} is unreadable: {e}", key=m.DATASET_KEY)
    latest = manifest.latest_version()
    boundary = manifest.gc_boundary()
    if dataset is None and latest == 0:
        problem(f"no TGB namespace here (no {m.DATASET_KEY}, no log versions)")
        return
    if dataset is None and latest > 0:
        problem(f"{m.DATASET_KEY} is missing but {latest} versions exist", key=m.DATASET_KEY)
    layout = dict(dataset.layout) if dataset is not None else {}
    want_dp, want_cp = layout.get("dp"), layout.get("cp", 1)

    # 1. versions present: from the boundary (kept) to the newest, no holes, nothing beyond
    listed = set()
    for key in store.list(m.LOG_PREFIX):
        stem = key[len(m.LOG_PREFIX) :].split(".")[0]
        if stem.isdigit():
            listed.add(int(stem))
    oldest = max(1, boundary.version)
    for number in sorted(n for n in listed if n > latest):
        problem(f"log object exists beyond the newest contiguous version {latest} (a hole before it?)", version=number)

    # 2. the step sequence, replayed from the boundary snapshot
    if boundary.version > 0:
        base = manifest.read_snapshot(boundary.version)
        if base is None:
            problem("snapshot of the GC boundary version is missing", version=boundary.version)
            return
        num_steps_before = None  # boundary version is kept: its first_step starts the check
        producers = {pid: (s.epoch, s.next_offset) for pid, s in base.producers.items()}
    else:
        base = None
        num_steps_before = 0
        producers = {}
    referenced: set[str] = set()
    expected_first = num_steps_before
    sealed_at: int | None = None
    snapshots = _snapshot_numbers(store, m)
    entries: list[tuple[int, int, Any]] = []  # (version, step, entry)
    for number in range(oldest, latest + 1):
        try:
            version = manifest.read_version(number)
        except TGBError as e:
            problem(f"unreadable: {e}", version=number, key=m.version_key(number))
            expected_first = None
            continue
        report.versions_checked += 1
        for i, entry in enumerate(version.entries):
            entries.append((number, version.first_step + i, entry))
            referenced.add(entry.key)
        if number == boundary.version and base is not None:
            # the boundary snapshot is the state *after* this version
            if version.stop_step != base.num_steps:
                problem(
                    f"snapshot says num_steps={base.num_steps} but the version ends at step {version.stop_step}",
                    version=number,
                )
            expected_first = version.stop_step
            continue
        if expected_first is not None and version.first_step != expected_first:
            problem(f"first_step={version.first_step}, expected {expected_first}", version=number)
        expected_first = version.stop_step
        if sealed_at is not None and version.entries:
            problem(f"appends {len(version.entries)} entries after the seal at version {sealed_at}", version=number)
        if version.sealed and sealed_at is None:
            sealed_at = number
        first_offset: dict[str, int] = {}
        for entry in version.entries:
            first_offset.setdefault(entry.producer, entry.offset)
        for pid, state in version.producers.items():
            before = producers.get(pid)
            if before is not None:
                epoch, next_offset = before
                if state.epoch < epoch:
                    problem(f"producer {pid!r} epoch went back from {epoch} to {state.epoch}", version=number)
                if pid in first_offset and first_offset[pid] != next_offset:
                    problem(
                        f"producer {pid!r} continues at offset={first_offset[pid]}, its previous state said "
                        f"next_offset={next_offset}",
                        version=number,
                        step=version.first_step + next(
                            i for i, e in enumerate(version.entries) if e.producer == pid
                        ),
                    )
            producers[pid] = (state.epoch, state.next_offset)
        for pid in first_offset:
            if pid not in version.producers:
                problem(f"entries of producer {pid!r} without its producer state", version=number)
        snap = manifest.read_snapshot(number) if number in snapshots else None
        if snap is not None:
            if snap.num_steps != version.stop_step or bool(snap.sealed) != (sealed_at is not None):
                problem(
                    f"snapshot disagrees with the log: num_steps={snap.num_steps} sealed={snap.sealed}, "
                    f"log says num_steps={version.stop_step} sealed={sealed_at is not None}",
                    version=number,
                )
            for pid, state in snap.producers.items():
                if producers.get(pid) != (state.epoch, state.next_offset):
                    problem(
                        f"snapshot producer {pid!r} at epoch={state.epoch} next_offset={state.next_offset}, "
                        f"log says {producers.get(pid)}",
                        version=number,
                    )

    # 3. the objects
    bar = progress(entries, desc="verify", unit="step")
    for number, step, entry in bar:
        if step < boundary.step:
            continue  # reclaimed steps of the kept boundary version: their objects may be gone
        report.steps_checked += 1
        try:
            info = store.stat(entry.key)
        except TGBError as e:
            problem(f"object missing or unreadable: {e}", version=number, step=step, key=entry.key)
            continue
        report.objects_checked += 1
        if info.size != entry.size:
            problem(f"size {info.size} bytes, the manifest says {entry.size}", version=number, step=step, key=entry.key)
            continue
        try:
            footer = read_footer(
                store, entry.key, size=entry.size, footer_offset=entry.footer_offset, footer_length=entry.footer_length
            )
            if want_dp is not None and (footer.dp, footer.cp) != (want_dp, want_cp):
                problem(
                    f"object has dp={footer.dp} cp={footer.cp}, the namespace layout says dp={want_dp} cp={want_cp}",
                    version=number,
                    step=step,
                    key=entry.key,
                )
            slices = footer.slices()
            if crc:
                data = store.get(entry.key)
                report.bytes_checked += len(data)
                with warnings.catch_warnings():
                    # tensors viewing read-only bytes: fine here, they are only checked, never written
                    warnings.simplefilter("ignore", UserWarning)
                    for s in slices:
                        decode_slice(data, s, base_offset=0, verify=True, key=entry.key)
            else:
                report.bytes_checked += entry.footer_length
        except TGBError as e:
            problem(f"{type(e).__name__}: {e}", version=number, step=step, key=entry.key)

    # 4. watermarks, and what lies under data/ without a reference
    try:
        marks = read_watermarks(store)
        retired = retired_ids(store)
        for mark in marks:
            if mark.checkpoint_id not in retired and mark.step < boundary.step:
                problem(
                    f"live checkpoint {mark.checkpoint_id!r} resumes at step {mark.step}, below the GC boundary "
                    f"step {boundary.step}: its data was reclaimed",
                    step=mark.step,
                )
    except TGBError as e:
        problem(f"watermarks unreadable: {e}")
    for key in store.list("data/"):
        if key not in referenced:
            try:
                size = store.size(key)
            except TGBError:
                continue
            report.unreferenced_objects += 1
            report.unreferenced_bytes += size


def _snapshot_numbers(store: Any, m: Any) -> set[int]:
    numbers = set()
    for key in store.list(m.SNAPSHOT_PREFIX):
        stem = key[len(m.SNAPSHOT_PREFIX) :].split(".")[0]
        if stem.isdigit():
            numbers.add(int(stem))
    return numbers
