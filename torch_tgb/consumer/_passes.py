"""A sealed namespace as a finite dataset: the steps of one pass, and when a new iteration begins the next pass.

A stream read (``shuffle=False, epochs=1``) of a namespace that is not sealed
has no length: ``len()`` raises ``TypeError`` as an unsized iterable does, and
frameworks treat the reader as a stream. Once the namespace is sealed its
step count never changes, so a pass has a length (:func:`pass_length`): the
consumer steps this rank reads from step 0 to the seal (or ``stop_step``),
under its read plan:

- ``tgbs_per_step = k > 1`` (more dp ranks than written, ``"merge"``): ``N // k``
  (a partial step at the end is not delivered);
- ``steps_per_tgb = m > 1`` (fewer dp ranks, ``"spread"``): ``N * m``;
- otherwise ``N``; an epochs read counts the same per epoch.

Training frameworks iterate a loader once per epoch, and a finite dataset is
read once per iteration. A stream read continues where the last iteration
stopped; when an iteration *begins* with no step of the pass left
(:func:`steps_left` is 0), the namespace is sealed and nothing below its
steps was reclaimed, the reader goes on with the next pass: from there it
reads as an unshuffled ``epochs=None`` read (``consumer/_epochs.py``) whose
state keeps ``"tgb_cursor"`` at step 0, so a watermark never lets the
Reclaimer delete a step a later pass reads. A ``stop_step`` read, or a
namespace whose first steps were reclaimed, stays one pass (with a warning).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch_tgb.cursor import Cursor
from torch_tgb.datapipes.read.project import cursor_at
from torch_tgb.manifest import Manifest
from torch_tgb.storage import ObjectStore, open_store

__all__ = ["pass_length", "sealed_namespace", "steps_left"]


def steps_left(start: Cursor, end: int, *, tgbs_per_step: int, steps_per_tgb: int) -> int:
    """Consumer steps a reader at ``start`` delivers before TGB step ``end`` (whole consumer steps only).

    ``LayoutError`` for a start inside a TGB that this plan cannot start from (as the read path raises).
    """
    cursor_at(start, 0, tgbs_per_step=tgbs_per_step, steps_per_tgb=steps_per_tgb)  # raises for such a start
    if tgbs_per_step > 1:
        return max(0, (end - start.step) // tgbs_per_step)
    if steps_per_tgb > 1:
        return max(0, (end - start.step) * steps_per_tgb - start.split(steps_per_tgb))
    return max(0, end - start.step)


def pass_length(num_steps: int, *, tgbs_per_step: int, steps_per_tgb: int, stop_step: int | None = None) -> int:
    """Consumer steps of one pass over a namespace of ``num_steps`` TGB steps (ended at ``stop_step`` if set)."""
    end = num_steps if stop_step is None else min(num_steps, stop_step)
    return steps_left(Cursor(0), end, tgbs_per_step=tgbs_per_step, steps_per_tgb=steps_per_tgb)


def sealed_namespace(ns: str | ObjectStore, storage_options: Mapping[str, Any] | None) -> tuple[int | None, int]:
    """``(steps, reclaimed)``: the step count if the namespace is sealed (else None), and the GC boundary's step."""
    store = open_store(ns, dict(storage_options or {}) or None)
    try:
        manifest = Manifest(store)
        head = manifest.head()
        return (int(head.num_steps) if head.sealed else None), int(manifest.gc_boundary().step)
    finally:
        if not isinstance(ns, ObjectStore):  # a store handed in belongs to the caller
            store.close()
