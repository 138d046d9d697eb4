"""The cursor: where a reader stands in the step sequence.

A cursor counts in TGB steps (positions in the manifest's step sequence), so
it means the same thing under every topology. ``sub_step / sub_steps`` is the
fraction of step ``step`` already consumed: it is non-zero only for a reader
that spreads one TGB over several of its own steps (fewer DP ranks than the
TGB was cut for, ``dp_split="spread"``). ``version`` is the newest manifest
version the reader had seen; it orders nothing, it tells a watermark or an
error message which version the position was taken under.

``cursor_of`` finds every cursor inside any nesting (a TGBDataset state, a
StatefulDataLoader state whose worker snapshots each hold one) and returns the
smallest: every step before it has been delivered to the trainer, so it is the
position a restart continues from and the step a watermark protects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from torch_tgb.errors import LayoutError

__all__ = ["CURSOR_KEY", "Cursor", "cursor_of", "find_cursors", "find_under"]

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


def find_under(state: Any, key: str) -> Iterator[Mapping[str, Any]]:
    """Every mapping stored under ``key`` anywhere inside ``state`` (dicts, lists and tuples, any depth).

    A consumer's state nests: a StatefulDataLoader holds one snapshot per
    worker, a DCP entry wraps the loader's. Readers find their positions here.
    """
    stack = [state]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for k, v in node.items():
                if k == key and isinstance(v, Mapping):
                    yield v
                else:
                    stack.append(v)
        elif isinstance(node, (list, tuple)):
            stack.extend(node)


def find_cursors(state: Any) -> Iterator[Cursor]:
    """Every cursor stored under ``"tgb_cursor"`` anywhere inside ``state``."""
    return (Cursor.from_json(v) for v in find_under(state, CURSOR_KEY))


def cursor_of(state: Any) -> Cursor:
    """The smallest cursor in ``state``: the first step not yet delivered.

    Ties on position keep the newest version seen. Raises ValueError when the
    state holds no cursor at all (not a consumer state).
    """
    best: Cursor | None = None
    for c in find_cursors(state):
        if best is None or c < best or (c.position == best.position and c.version > best.version):
            best = c
    if best is None:
        raise ValueError(f"no {CURSOR_KEY!r} found in the given state; is it a TGBDataset or DataLoader state?")
    return best
