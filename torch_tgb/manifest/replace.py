"""Committing replacement entries: one new manifest version that supersedes the entries of some steps.

The protocol is the commit protocol's (``commit.py``) for a writer that is no
producer and appends no step:

1. **Read** the newest state (``Manifest.head``): format 2 (a format-1
   namespace is migrated by any producer's next commit), every step to
   replace committed and at or above the GC boundary.
2. **Check the base**: a step whose entry in effect is no longer the one the
   rewrite was made from (another excision replaced it meanwhile) is a
   :class:`ReplacementConflict`: the caller rewrites from the new entry, so
   no excision ever undoes another.
3. **Write** the caller's audit record of the attempt (``audit``, naming
   the one before it), the touched buckets of replacements (copy on write,
   named by the slot and the attempt's token, ``_replaced.py``), then
   **create** version ``v+1`` with ``put_if_absent``: no
   entries, no producer, the seal, job and producers' table of ``v``, the new
   replacements. A reader that reads it applies all of them; one that does
   not, none.
4. **Conflict** (the slot was taken): back to 1 with the new newest state.
   **GC boundary**: a version created below it is kept only if the
   boundary's snapshot holds our replacements, else deleted and retried, as
   a committer does.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from torch_tgb.errors import CommitConflict, ManifestError
from torch_tgb.manifest._create import create_version, encode_candidate
from torch_tgb.manifest._replaced import BUCKET_STEPS, ReplacedBucket, ReplacedRef, Superseded, replaced_key
from torch_tgb.manifest._entry import TGBEntry
from torch_tgb.manifest.manifest import Manifest
from torch_tgb.manifest.records import ManifestState, Version

__all__ = ["Replacement", "ReplacementConflict", "commit_replacements", "entries_in_effect"]

log = logging.getLogger(__name__)

#: attempts before a replacement commit gives up (each a conflict with another writer)
MAX_ATTEMPTS = 64


class ReplacementConflict(CommitConflict):
    """A step to replace was replaced by another writer since the rewrite was made: rewrite it again."""


@dataclass(frozen=True)
class Replacement:
    """Step ``step``'s new ``entry``, made from the entry in effect whose key was ``base``."""

    step: int
    entry: TGBEntry
    base: str


def entries_in_effect(manifest: Manifest, steps: Sequence[int]) -> dict[int, TGBEntry]:
    """The entry in effect of each of ``steps`` at the newest version read (replacements applied).

    Runs of consecutive steps are read as one range.
    """
    out: dict[int, TGBEntry] = {}
    ordered = sorted(set(steps))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.update(zip(range(ordered[i], ordered[j] + 1), manifest.entries(ordered[i], ordered[j] + 1)))
        i = j + 1
    return out


def commit_replacements(
    manifest: Manifest, replacements: Sequence[Replacement], superseded: Sequence[tuple[str, int]], *,
    audit: Callable[[int, str, str], str] | None = None, clock: Callable[[], float] = time.time,
) -> int:
    """Commit ``replacements`` in one new version; returns its number (see the module docstring).

    ``superseded``: ``(key, last step it served)`` of the objects no entry in
    effect will name once it lands. ``audit(number, token, previous)`` is
    called before each attempt's create (after its buckets are written): it
    writes the audit record of the attempt, naming the ``previous`` one (``""``:
    none), and returns its key, which the version names.
    """
    if not replacements:
        raise ValueError("commit_replacements: nothing to replace")
    by_step = {r.step: r for r in replacements}
    for attempt in range(MAX_ATTEMPTS):
        head = manifest.head()
        number = _check_head(manifest, head, by_step)
        _check_bases(manifest, head, by_step)
        token = uuid.uuid4().hex
        now = clock()
        previous = head.replaced.audit if head.replaced is not None else ""
        key = audit(number, token, previous) if audit is not None else ""
        candidate = _candidate(manifest, head, number, token, by_step, superseded, now, key)
        data = encode_candidate(head, candidate, where=manifest.where)
        created, _ = create_version(manifest.store, manifest, number, data, token, retries=8)
        if not created:
            continue  # another writer took the slot: read the newest state and try the next one
        boundary = manifest.gc_boundary()
        if number < boundary.version:
            snapshot = manifest.read_snapshot(boundary.version)
            if snapshot is not None and snapshot.replaced == candidate.replaced:
                return number  # ours, and reclaimed right after: the boundary's snapshot holds it
            log.warning("%s: replacement version=%d landed in a slot reclaimed below GC boundary version=%d; "
                        "retrying", manifest.where, number, boundary.version)
            manifest.store.delete(manifest.version_key(number))
            manifest.forget(number)
            continue
        manifest.remember(candidate)
        return number
    raise ManifestError(f"{manifest.where}replacements not committed after {MAX_ATTEMPTS} conflicting attempts")


def _check_head(manifest: Manifest, head: ManifestState, by_step: Mapping[int, Replacement]) -> int:
    if head.table is None:
        raise ManifestError(f"{manifest.where}version={head.version} is manifest format 1: replacement entries need "
                            "format 2 (any producer of this torch_tgb migrates the namespace with its next commit)")
    boundary = manifest.gc_boundary()
    bad = sorted(s for s in by_step if not boundary.step <= s < head.num_steps)
    if bad:
        raise ManifestError(f"{manifest.where}cannot replace steps {bad[:8]}: committed steps are "
                            f"[{boundary.step}, {head.num_steps}) at version={head.version} (GC boundary)")
    return head.version + 1


def _check_bases(manifest: Manifest, head: ManifestState, by_step: Mapping[int, Replacement]) -> None:
    """Raise :class:`ReplacementConflict` if a step's entry in effect at ``head`` is not the one rewritten."""
    now = entries_in_effect(manifest, list(by_step))
    moved = sorted(s for s, r in by_step.items() if now[s].key != r.base)
    if moved:
        raise ReplacementConflict(f"{manifest.where}steps {moved[:8]} were replaced by another writer (version "
                                  f"{head.replaced.version if head.replaced else '?'}) since they were rewritten; "
                                  "rewrite them again")


def _candidate(manifest: Manifest, head: ManifestState, number: int, token: str, by_step: Mapping[int, Replacement],
               superseded: Sequence[tuple[str, int]], now: float, audit: str) -> Version:
    """Write the touched buckets; the replacement version naming them."""
    old = head.replaced
    refs = dict(old.buckets) if old is not None else {}
    counted = old.steps if old is not None else 0
    ref_name = f"{number}-{token[:8]}"
    grouped: dict[int, dict[int, TGBEntry]] = {}
    for step, r in by_step.items():
        grouped.setdefault(step // BUCKET_STEPS, {})[step] = r.entry
    gone = [Superseded(key, number, now, last) for key, last in superseded]
    for b, group in sorted(grouped.items()):
        current = manifest.replacements.bucket(old, b) if old is not None else ReplacedBucket.empty(b)
        mine = gone if b == min(grouped) else []  # the superseded objects are listed once, in the first bucket
        updated = current.with_replacements(group, version=number, superseded=mine)
        manifest.store.put(replaced_key(b, ref_name), updated.encode())
        counted += len(updated.steps) - len(current.steps)
        refs[b] = ref_name
    replaced = ReplacedRef(tuple(sorted(refs.items())), number, counted, (old.excisions if old else 0) + 1, audit)
    return Version(number, token, head.num_steps, (), {}, head.sealed, now, head.job, head.table, replaced)
