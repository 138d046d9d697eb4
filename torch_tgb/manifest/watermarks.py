"""Watermarks: which steps a live checkpoint can roll back to.

After a checkpoint is saved the trainer records the cursor stored in it as
``_tgb/watermarks/<checkpoint_id>.json``; when it deletes the checkpoint it
writes the marker ``_tgb/retired/<checkpoint_id>``. A checkpoint is *live*
when it is recorded and not retired. The *safe boundary* is the smallest
cursor step over live checkpoints (0 when there is none): nothing at or above
it may be reclaimed, and producers with ``max_lag`` stay within ``max_lag``
steps of it.

Ordering rules (why this is safe without locks):

- A watermark is written *before* ``record_watermark`` returns, so a
  Reclaimer that lists watermarks afterwards protects it. A Reclaimer that
  listed earlier may advance the GC boundary past a cursor that is older than
  every other live checkpoint; ``record_watermark`` re-reads the GC boundary
  after writing and fails loud if the checkpoint can no longer resume.
- Re-recording a retired id is refused while its marker exists, so a retired
  checkpoint does not come back to life. The Reclaimer deletes a retired
  checkpoint's watermark and then its marker (listings stay bounded by the
  live checkpoints); after that the id is free again, and a cursor below the
  GC boundary is refused as for any id.
- Reading is strict: a malformed watermark raises instead of being skipped,
  since skipping one could let the Reclaimer delete what it protects.

Sizing ``max_lag``: a trainer that checkpoints every ``C`` steps and keeps
``K`` checkpoints live holds the safe boundary ``(K - 1) * C`` steps behind
its newest checkpoint and must read ``C`` steps past that one to save the
next, so producers must be allowed ``max_lag >= C * K`` steps ahead of the
safe boundary; with less they pause, the trainer waits for data, and
neither moves again. :class:`Retention` is what a producer can see of ``C``
and ``K`` (the live watermarks) and says when ``max_lag`` cannot satisfy it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch_tgb.cursor import cursor_of, reader_states
from torch_tgb.errors import InvalidKey, ManifestError, ObjectNotFound
from torch_tgb.manifest._json import MAX_METADATA_BYTES, load_json
from torch_tgb.manifest.manifest import Manifest
from torch_tgb.storage import ObjectStore, open_store

__all__ = [
    "MAX_LAG_RULE",
    "RETIRED_PREFIX",
    "WATERMARK_PREFIX",
    "Retention",
    "Watermark",
    "keep_last",
    "live_checkpoints",
    "read_watermarks",
    "record_watermark",
    "retire",
    "retired_ids",
    "safe_boundary",
    "validate_checkpoint_id",
]

WATERMARK_PREFIX = "_tgb/watermarks/"
RETIRED_PREFIX = "_tgb/retired/"
_FORMAT = 1
#: the sizing rule a trainer's retention imposes on producers' max_lag (docs/operations.md, *Sizing producers*)
MAX_LAG_RULE = "max_lag >= checkpoint interval x checkpoints kept"
# One plain key segment: no separators, no dot-only names, bounded length.
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._=+@-]{0,199}$")


@dataclass(frozen=True)
class Watermark:
    """The cursor saved in checkpoint ``checkpoint_id`` (TGB-step units).

    ``replaced``: the view version of the replacement entries its reader
    applied (``tgb_source``, docs/provenance.md); ``-1`` when its state does
    not say (an older reader): the Reclaimer then keeps every object an
    excision superseded at or after its step.
    """

    checkpoint_id: str
    step: int
    version: int
    sub_step: int = 0
    time: float = 0.0
    replaced: int = -1

    def to_json(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "checkpoint_id": self.checkpoint_id,
            "step": self.step,
            "version": self.version,
            "sub_step": self.sub_step,
            "time": self.time,
            **({"replaced": self.replaced} if self.replaced >= 0 else {}),
        }

    @classmethod
    def from_json(cls, data: object, *, key: str) -> Watermark:
        try:
            if not isinstance(data, dict) or data.get("format") != _FORMAT:
                raise ValueError(f"expected a format-{_FORMAT} object")
            mark = cls(
                checkpoint_id=data["checkpoint_id"],
                step=data["step"],
                version=data["version"],
                sub_step=data.get("sub_step", 0),
                time=float(data["time"]),
                replaced=data.get("replaced", -1),
            )
            validate_checkpoint_id(mark.checkpoint_id)
            if isinstance(mark.replaced, bool) or not isinstance(mark.replaced, int) or mark.replaced < -1:
                raise ValueError(f"replaced={mark.replaced!r} is not a version (or -1)")
            for name in ("step", "version", "sub_step"):
                value = getattr(mark, name)
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"{name}={value!r} is not a non-negative integer")
        except (KeyError, TypeError, ValueError) as e:
            raise ManifestError(f"malformed watermark {key!r}: {e}") from e
        if key != _watermark_key(mark.checkpoint_id):
            raise ManifestError(f"watermark {key!r} names checkpoint_id={mark.checkpoint_id!r}")
        return mark


@dataclass(frozen=True)
class Retention:
    """What the live checkpoints show of a trainer's retention: their steps, ascending and distinct.

    ``interval`` (``C``) is the largest gap between consecutive live
    checkpoints, unknown with fewer than two; ``lag_needed`` is the lag the
    trainer needs to save its next checkpoint, ``newest - oldest + C``
    (``C * K`` when they are evenly spaced). A guess from what is recorded
    now: watermarks of another run, or a trainer that changes its interval,
    make it wrong, so producers warn with it and never refuse.
    """

    steps: tuple[int, ...]

    @classmethod
    def of(cls, marks: Sequence[Watermark]) -> Retention:
        return cls(tuple(sorted({m.step for m in marks})))

    @property
    def interval(self) -> int | None:
        if len(self.steps) < 2:
            return None
        return max(b - a for a, b in zip(self.steps, self.steps[1:]))

    @property
    def lag_needed(self) -> int | None:
        interval = self.interval
        return None if interval is None else self.steps[-1] - self.steps[0] + interval

    def shortfall(self, max_lag: int) -> str | None:
        """Why ``max_lag`` cannot let the trainer reach its next checkpoint, naming the rule; ``None`` if it can.

        ``None`` also when it cannot be told (fewer than two live checkpoints).
        """
        needed = self.lag_needed
        if needed is None or max_lag >= needed:
            return None
        return (
            f"max_lag={max_lag} is below what the trainer's retention needs: {len(self.steps)} live checkpoints "
            f"every {self.interval} steps (steps {self.steps[0]}..{self.steps[-1]}) need max_lag >= {needed} "
            f"({MAX_LAG_RULE}): the trainer saves its next checkpoint at step {self.steps[0] + needed} once it has "
            f"read every step below it, but producers stop at step {self.steps[0] + max_lag} ({max_lag} past the "
            f"oldest live checkpoint), so they pause, the trainer waits for data, and neither moves again; "
            f"raise max_lag to at least {needed}, or keep fewer checkpoints"
        )


def validate_checkpoint_id(checkpoint_id: object) -> str:
    """Return ``checkpoint_id`` if it is one safe key segment, else raise :class:`InvalidKey`.

    DCP checkpoint ids are often paths; pass a name (``os.path.basename``).
    """
    if not isinstance(checkpoint_id, str) or not _ID.match(checkpoint_id):
        raise InvalidKey(
            f"checkpoint_id={checkpoint_id!r} must be 1-200 characters of [A-Za-z0-9._=+@-], "
            "not starting with '.' or '-' and without '/' (pass a name, not a path)"
        )
    return checkpoint_id


def _watermark_key(checkpoint_id: str) -> str:
    return f"{WATERMARK_PREFIX}{checkpoint_id}.json"


def _retired_key(checkpoint_id: str) -> str:
    return f"{RETIRED_PREFIX}{checkpoint_id}"


def record_watermark(
    ns_or_store: str | ObjectStore,
    checkpoint_id: str,
    state: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    storage_options: Mapping[str, Any] | None = None,
) -> Watermark:
    """Record the cursor of ``state`` (a dataset/loader ``state_dict()``, or a list of them) for a saved checkpoint.

    Call it after the checkpoint is durable (on one rank: every rank's cursor
    is at the same step). Re-recording the same live id replaces its watermark.
    Raises ``ValueError`` if ``state`` holds no ``"tgb_cursor"``, and
    :class:`ManifestError` if the id was retired or if data the cursor needs
    has already been reclaimed (the checkpoint could not resume).
    """
    validate_checkpoint_id(checkpoint_id)
    store = open_store(ns_or_store, storage_options)
    position = cursor_of(state)
    if store.exists(_retired_key(checkpoint_id)):
        raise ManifestError(f"{store.url}: checkpoint_id={checkpoint_id!r} is retired; record it under a new id")
    mark = Watermark(checkpoint_id, position.step, position.version, position.sub_step, time.time(), _view_of(state))
    key = _watermark_key(checkpoint_id)
    store.put(key, json.dumps(mark.to_json(), sort_keys=True).encode())
    reclaimed = _reclaimed_step(store)
    if mark.step < reclaimed:
        store.delete(key)
        raise ManifestError(
            f"{store.url}: checkpoint_id={checkpoint_id!r} resumes at step={mark.step}, "
            f"but steps below {reclaimed} are already reclaimed (no live checkpoint protected them)"
        )
    return mark


def _view_of(state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> int:
    """The oldest replacement view among the reader states of ``state`` (``tgb_source``); -1 if one does not say."""
    views = []
    for reader in reader_states(state):
        source = reader.get("tgb_source")
        views.append(int(source["replaced"]) if isinstance(source, Mapping) and "replaced" in source else -1)
    return min(views, default=-1)


def retire(
    ns_or_store: str | ObjectStore,
    checkpoint_id: str,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Mark a checkpoint deleted: its data may be reclaimed. Idempotent."""
    validate_checkpoint_id(checkpoint_id)
    store = open_store(ns_or_store, storage_options)
    key = _retired_key(checkpoint_id)
    if not store.exists(key):
        store.put(key, json.dumps({"checkpoint_id": checkpoint_id, "time": time.time()}).encode())


def read_watermarks(store: ObjectStore) -> list[Watermark]:
    """Every recorded watermark (live or retired), sorted by (time, step, id)."""
    marks = []
    for key in store.list(WATERMARK_PREFIX):
        if not key.endswith(".json"):
            continue  # temporary files of a backend, never ours
        try:
            # Bounded read: a planted giant object must not be read whole by every producer.
            raw = store.get_range(key, 0, MAX_METADATA_BYTES + 1)
        except ObjectNotFound:
            continue  # removed after listing (cleanup of a retired checkpoint)
        data = load_json(raw, what=f"{store.url}: watermark {key!r}")
        marks.append(Watermark.from_json(data, key=key))
    return sorted(marks, key=lambda m: (m.time, m.step, m.checkpoint_id))


def retired_ids(store: ObjectStore) -> set[str]:
    """Ids with a retirement marker."""
    return {key[len(RETIRED_PREFIX) :] for key in store.list(RETIRED_PREFIX)}


def live_checkpoints(ns_or_store: str | ObjectStore, storage_options: Mapping[str, Any] | None = None) -> list[Watermark]:
    """Watermarks of checkpoints recorded and not retired, oldest recorded first.

    Retirement markers are listed *before* watermarks. A trainer rotates by
    recording the new checkpoint B, then retiring the old A. If A's marker
    appears after our marker listing, A still counts as live (its watermark
    is only deleted by a Reclaimer that saw the marker); if it appeared
    before, B was recorded even earlier and the watermark listing sees it.
    Either way one of them protects the data. The opposite order could see A
    retired and miss B, leaving B's steps unprotected.
    """
    store = open_store(ns_or_store, storage_options)
    retired = retired_ids(store)
    marks = read_watermarks(store)
    return [m for m in marks if m.checkpoint_id not in retired]


def safe_boundary(ns_or_store: str | ObjectStore, storage_options: Mapping[str, Any] | None = None) -> int:
    """Smallest cursor step over live checkpoints; 0 when there is none.

    Steps at or above it must stay readable; steps strictly below it are
    unreachable from every live checkpoint.
    """
    live = live_checkpoints(ns_or_store, storage_options)
    return min((m.step for m in live), default=0)


def keep_last(
    ns_or_store: str | ObjectStore, k: int, storage_options: Mapping[str, Any] | None = None
) -> list[str]:
    """Retire every live checkpoint but the ``k`` most recently recorded; returns the ids retired."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"keep_last: k={k!r} must be a non-negative integer")
    store = open_store(ns_or_store, storage_options)
    live = live_checkpoints(store)
    doomed = live[: max(0, len(live) - k)]
    for mark in doomed:
        retire(store, mark.checkpoint_id)
    return [m.checkpoint_id for m in doomed]


def _reclaimed_step(store: ObjectStore) -> int:
    """First step not yet reclaimed: the GC boundary's step (0 before any reclamation)."""
    return Manifest(store).gc_boundary().step
