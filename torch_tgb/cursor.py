"""The cursor: where a reader stands in the step sequence.

A cursor counts in TGB steps (positions in the manifest's step sequence), so
it means the same thing under every topology. ``sub_step / sub_steps`` is the
fraction of step ``step`` already consumed: it is non-zero only for a reader
that spreads one TGB over several of its own steps (fewer DP ranks than the
TGB was cut for, ``dp_split="spread"``). ``version`` is the newest manifest
version the reader had seen; it orders nothing, it tells a watermark or an
error message which version the position was taken under.

A reader's state is found by path, never by scanning (:func:`reader_states`):
a ``TGBDataset`` state holds ``"tgb_cursor"`` at its top; a ``StatefulDataLoader``
(``tgb.DataLoader``) keeps its dataset's state under ``"dataset_state"`` when it
reads in-process, and one per worker under
``"_snapshot" / "_worker_snapshots" / "worker_<i>" / "dataset_state"`` with
workers (torchdata's nesting; ``tests/consumer/test_cursor.py`` pins it).
``cursor_of`` returns the smallest cursor among them: every step before it has
been delivered to the trainer, so it is the position a restart continues from
and the step a watermark protects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from torch_tgb.errors import LayoutError

__all__ = ["CURSOR_KEY", "Cursor", "cursor_of", "find_cursors", "reader_states"]

#: key under which every state dict of the consumer stores its cursor
CURSOR_KEY = "tgb_cursor"


@dataclass(frozen=True, order=False)
class Cursor:
    """Position ``step + sub_step/sub_steps`` in the step sequence, seen at ``version``."""

    step: int
    version: int = 0
    sub_step: int = 0
    sub_steps: int = 1

    def __post_init__(self) -> None:
        if self.step < 0 or self.version < 0:
            raise ValueError(f"cursor step and version must be >= 0, got {self.step=} {self.version=}")
        if self.sub_steps < 1 or not (0 <= self.sub_step < self.sub_steps):
            raise ValueError(f"cursor sub_step must be in [0, sub_steps), got {self.sub_step=} {self.sub_steps=}")

    @property
    def position(self) -> Fraction:
        """Exact position in TGB units (step plus the consumed fraction of it)."""
        return self.step + Fraction(self.sub_step, self.sub_steps)

    def at_boundary(self) -> bool:
        return self.sub_step == 0

    def split(self, parts: int) -> int:
        """Index of this position among ``parts`` equal sub-steps of ``step``.

        Raises LayoutError when the position falls inside one of them (a cursor
        taken by a reader that split a TGB another way).
        """
        if self.sub_step == 0:
            return 0
        if self.sub_steps == parts:
            return self.sub_step
        frac = Fraction(self.sub_step, self.sub_steps) * parts
        if frac.denominator != 1:
            raise LayoutError(
                f"cursor at step={self.step} sub_step={self.sub_step}/{self.sub_steps} (version "
                f"{self.version}) lies inside a step of a reader that splits each TGB into {parts} "
                "steps; resume with a topology that can express it, or from a step boundary"
            )
        return int(frac)

    def to_json(self) -> dict[str, int]:
        return {"step": self.step, "version": self.version, "sub_step": self.sub_step, "sub_steps": self.sub_steps}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Cursor:
        try:
            return cls(
                step=int(d["step"]),
                version=int(d.get("version", 0)),
                sub_step=int(d.get("sub_step", 0)),
                sub_steps=int(d.get("sub_steps", 1)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed {CURSOR_KEY} {dict(d)!r}: {e}") from e

    def __lt__(self, other: Cursor) -> bool:
        return self.position < other.position

    def __le__(self, other: Cursor) -> bool:
        return self.position <= other.position


#: where a StatefulDataLoader keeps its dataset's state (in-process, and inside each worker snapshot)
DATASET_STATE_KEY = "dataset_state"
#: where a multi-worker StatefulDataLoader keeps its workers' snapshots
WORKER_SNAPSHOTS_PATH = ("_snapshot", "_worker_snapshots")


def reader_states(state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The reader (``TGBDataset``) states inside ``state``, found by path.

    ``state`` is a reader's own state (``"tgb_cursor"`` at its top), or the
    state of a ``StatefulDataLoader`` over a reader: in-process (the reader's
    under ``"dataset_state"``) or with workers (one per worker snapshot); or a
    list of such states (e.g. every rank's). Raises ``ValueError`` for any
    other shape, naming the ones it knows.
    """
    if isinstance(state, (list, tuple)):
        return [reader for one in state for reader in reader_states(one)]
    if not isinstance(state, Mapping):
        raise ValueError(f"a reader state is a mapping (or a list of them), got {type(state).__name__}")
    if CURSOR_KEY in state:
        return [state]
    inner = state.get(DATASET_STATE_KEY)
    if isinstance(inner, Mapping) and CURSOR_KEY in inner:
        return [inner]
    snapshots: Any = state
    for key in WORKER_SNAPSHOTS_PATH:
        snapshots = snapshots.get(key) if isinstance(snapshots, Mapping) else None
    if isinstance(snapshots, Mapping):
        found = [w.get(DATASET_STATE_KEY) for w in snapshots.values() if isinstance(w, Mapping)]
        if found and all(isinstance(f, Mapping) and CURSOR_KEY in f for f in found):
            return found  # type: ignore[return-value]  # checked just above
    raise ValueError(
        f"no {CURSOR_KEY!r} found in the given state (keys {sorted(map(str, state))[:8]}): pass the state_dict() "
        f"of a TGBDataset or tgb.DataLoader (a reader's state holds {CURSOR_KEY!r} at its top, a loader's under "
        f"{DATASET_STATE_KEY!r} or {'/'.join(WORKER_SNAPSHOTS_PATH)}/worker_<i>/{DATASET_STATE_KEY})"
    )


def find_cursors(state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Iterator[Cursor]:
    """The cursor of every reader state in ``state`` (see :func:`reader_states`)."""
    return (Cursor.from_json(s[CURSOR_KEY]) for s in reader_states(state))


def cursor_of(state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Cursor:
    """The smallest cursor in ``state``: the first step not yet delivered.

    Ties on position keep the newest version seen. Raises ValueError when the
    state is not a reader's or a loader's (see :func:`reader_states`).
    """
    best: Cursor | None = None
    for c in find_cursors(state):
        if best is None or c < best or (c.position == best.position and c.version > best.version):
            best = c
    if best is None:
        raise ValueError(f"no {CURSOR_KEY!r} found in the given state; is it a TGBDataset or DataLoader state?")
    return best
