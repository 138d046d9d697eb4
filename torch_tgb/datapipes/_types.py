"""Items that flow between the consumer pipeline stages."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from torch_tgb.cursor import Cursor
from torch_tgb.layout import Piece

__all__ = ["ReadTask", "StepBatch", "StepEntry"]


@dataclass(frozen=True)
class StepEntry:
    """One committed TGB at position ``step``, as seen at manifest ``version``."""

    step: int
    version: int
    entry: Any  # manifest TGBEntry: key, size, footer_offset, footer_length, ...

    @property
    def key(self) -> str:
        return str(self.entry.key)


@dataclass(frozen=True)
class ReadTask:
    """What one consumer step of this rank reads, and how to assemble it.

    ``entries`` are all TGBs the step spans (identical on every rank: the
    consistency check compares them); ``pieces`` the slices of them this rank
    reads, in assembly order (``Piece.tgb`` indexes ``entries``). ``footers`` maps object key to parsed footer and
    is filled by FooterIndex.
    """

    index: int
    cursor: Cursor
    entries: tuple[StepEntry, ...]
    pieces: tuple[Piece, ...]
    assemble: Callable[[Sequence[Mapping[str, Tensor]]], dict[str, Tensor]]
    footers: Mapping[str, Any] = field(default_factory=dict)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(e.key for e in self.entries)


@dataclass(frozen=True)
class StepBatch:
    """This rank's tensors for one consumer step, with where they came from."""

    task: ReadTask
    tensors: dict[str, Tensor]
