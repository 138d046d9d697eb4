"""Items that flow between the consumer pipeline stages, and the seams between them.

Each stage names what it needs of its neighbours as a small Protocol rather
than ``Any``: ``ManifestView`` (what the poller reads), ``Lookahead`` (a stage
that can say how much it could hand out without waiting), ``Interruptible``
(a stage whose blocking wait another thread may end). Optional capabilities are
checked with ``isinstance`` against these runtime-checkable Protocols.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from torch import Tensor

from torch_tgb.cursor import Cursor
from torch_tgb.format import Footer
from torch_tgb.errors import TGBError
from torch_tgb.layout import Piece
from torch_tgb.manifest import ManifestState, TGBEntry

__all__ = [
    "Interruptible",
    "Lookahead",
    "ManifestView",
    "Position",
    "ReadTask",
    "RunSource",
    "StepBatch",
    "StepEntry",
    "StepLookahead",
    "StepSource",
]


class ManifestView(Protocol):
    """What a reader needs of the manifest: ``torch_tgb.manifest.Manifest`` fits."""

    @property
    def url(self) -> str: ...

    def head(self) -> ManifestState: ...

    def entries(self, start_step: int, stop_step: int) -> list[TGBEntry]: ...


@runtime_checkable
class Lookahead(Protocol):
    """A stage that knows how many items it can hand out without waiting for new commits."""

    def available(self, limit: int = 64) -> int: ...


@runtime_checkable
class StepLookahead(Lookahead, Protocol):
    """A step source that also says which step it yields next (``ManifestPoller``)."""

    @property
    def next_step(self) -> int: ...


@runtime_checkable
class Interruptible(Protocol):
    """A stage whose blocking wait (another thread's) can be ended; ``reset`` re-arms it."""

    def interrupt(self) -> None: ...


@runtime_checkable
class StepSource(StepLookahead, Protocol):
    """What ``Project`` reads from: a step stream it can position (``ManifestPoller``, ``BlockShuffle``)."""

    def state_at(self, step: int, version: int = 0) -> dict[str, int]: ...


@runtime_checkable
class RunSource(Protocol):
    """A step source that hands out runs of steps at once (``ManifestPoller``, ``BlockShuffle``): the run path's."""

    def next_run(self, limit: int) -> tuple[int, int, list[TGBEntry]]: ...

    def state_at(self, step: int, version: int = 0) -> dict[str, int]: ...


@dataclass(frozen=True)
class StepEntry:
    """One committed TGB at position ``step`` of the stream being read, as seen at manifest ``version``.

    ``step`` is the TGB's step in the manifest, except in a shuffled read, where
    it is the position in the shuffled sequence and ``manifest_step`` says
    which TGB that is.
    """

    step: int
    version: int
    entry: TGBEntry
    manifest_step: int | None = None

    @property
    def key(self) -> str:
        return self.entry.key

    @property
    def tgb_step(self) -> int:
        """The TGB's step in the manifest."""
        return self.step if self.manifest_step is None else self.manifest_step

    @property
    def address(self) -> tuple[str, int]:
        """Names this TGB: its object and footer offset (a segment object holds several TGBs)."""
        return (self.entry.key, self.entry.footer_offset)


@dataclass(frozen=True)
class Position:
    """Where a reading pipeline stands, as one value.

    ``cursor`` is the next step it delivers (TGB units; ``cursor.version`` is
    the newest manifest version seen); ``origin``, ``index`` and the plan
    ratios are what an exact same-setting restore needs (worker ``w`` counts
    its steps ``index = w, w + W, ...`` from ``origin``).
    """

    cursor: Cursor
    origin: Cursor
    index: int
    tgbs_per_step: int
    steps_per_tgb: int

    @property
    def plan(self) -> dict[str, int]:
        return {"tgbs_per_step": self.tgbs_per_step, "steps_per_tgb": self.steps_per_tgb}


@dataclass(frozen=True)
class ReadTask:
    """What one consumer step of this rank reads, and how to assemble it.

    ``entries`` are all TGBs the step spans (identical on every rank: the
    consistency check compares them); ``pieces`` the slices of them this rank
    reads, in assembly order (``Piece.tgb`` indexes ``entries``). ``footers``
    maps each entry's ``address`` (object key, footer offset) to its parsed
    footer and is filled by FooterIndex. ``error``: a reader that skips
    corrupt steps (``skip_errors``) carries the step's read error here
    instead of raising it; the step is then skipped, not read.
    """

    index: int
    cursor: Cursor
    entries: tuple[StepEntry, ...]
    pieces: tuple[Piece, ...]
    assemble: Callable[[Sequence[Mapping[str, Tensor]]], dict[str, Tensor]]
    footers: Mapping[tuple[str, int], Footer] = field(default_factory=dict)
    error: TGBError | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(e.key for e in self.entries)


@dataclass(frozen=True)
class StepBatch:
    """This rank's tensors for one consumer step, with where they came from.

    ``error``: the step could not be read (corrupt or missing) and the reader
    skips such steps: no tensors, the error that made it skip.
    """

    task: ReadTask
    tensors: dict[str, Tensor]
    error: TGBError | None = None
