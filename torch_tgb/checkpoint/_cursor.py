"""Find the cursor a checkpointed data state resumes from.

The consumer owns the one implementation (``torch_tgb.consumer.cursor_of``:
the smallest ``"tgb_cursor"`` dict anywhere inside a state). Until it lands
this module carries a minimal stand-in with the same contract, so that
watermarks can be recorded from a plain ``{"tgb_cursor": {"step": ...}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch_tgb.errors import ManifestError

__all__ = ["CursorPosition", "position_of"]


@dataclass(frozen=True, order=True)
class CursorPosition:
    """The (step, sub_step) a state resumes from, plus the manifest version it had read."""

    step: int
    sub_step: int = 0
    version: int = 0


def position_of(state: Mapping[str, Any]) -> CursorPosition:
    """Smallest cursor inside ``state``; :class:`ManifestError` if it holds none."""
    try:
        from torch_tgb.consumer import cursor_of  # type: ignore[attr-defined]
    except ImportError:
        cursor_of = None
    if cursor_of is not None:
        cursor = cursor_of(state)
        return CursorPosition(int(cursor.step), int(getattr(cursor, "sub_step", 0)), int(cursor.version))
    found = sorted(_walk(state))
    if not found:
        raise ManifestError("state holds no 'tgb_cursor': pass a TGBDataset / DataLoader state_dict()")
    return found[0]


def _walk(node: object) -> list[CursorPosition]:
    out: list[CursorPosition] = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "tgb_cursor" and isinstance(value, Mapping):
                out.append(_parse(value))
            else:
                out.extend(_walk(value))
    elif isinstance(node, (list, tuple)):
        for value in node:
            out.extend(_walk(value))
    return out


def _parse(cursor: Mapping[str, Any]) -> CursorPosition:
    try:
        step = cursor["step"]
        sub_step = cursor.get("sub_step", 0)
        version = cursor.get("version", 0)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (step, sub_step, version)):
            raise TypeError("non-negative integers expected")
    except (KeyError, TypeError) as e:
        raise ManifestError(f"malformed tgb_cursor {dict(cursor)!r}: {e}") from e
    return CursorPosition(step, sub_step, version)
