"""LocalRuns: the run path of a mapped local namespace.

When each consumer step reads slices of its own TGB only (``plan_reads``
with one TGB per step and one step per TGB: the written dp and cp, or fewer
dp ranks merging slices, or another cp split), one process reads, and the
namespace is local and mapped, the per-step pipeline ``Project ->
FooterIndex -> RangeReader`` does work that a run of consecutive steps
shares: every TGB of a segment object lives in one mapping and has the
same footer up to where it lies. ``LocalRuns`` reads the poller's
committed steps in runs (:meth:`ManifestPoller.next_run`), cut where the
object changes, parses each run's footers as one table
(:func:`torch_tgb.format.parse_footer_run`) and hands out a
:class:`StepRun` with one :class:`SliceRun` per slice a step reads: step
``first_step + i`` is ``slices[j].read(i)`` for each slice ``j``, one view
per tensor plus the CRC the verify policy asks for (``StepRun.read`` joins
several slices as the plan says). A step of one whole slice then costs
about what the memory floor costs plus that CRC
(``benchmarks/consumer_read.py``, section ``hot_path``).

The manifest entries' footer numbers are checked before anything is read,
as FooterIndex checks them. A run stops at the first TGB whose footer is not
a shifted copy of the run's first; that TGB starts the next run and is
parsed in full, so corrupt bytes fail with the full parser's message.

Statistics: each step counts one data request per slice and one footer
read, as on the step path; ``fetch_p50_s``/``fetch_p95_s`` sample the time to set up a
run (map, check, index), once per run.

State: the poller's state at the first step not yet handed out in a run
(steps taken from the poller beyond a cut run are taken again after a
reset, never skipped).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torchdata.nodes import BaseNode

from torch_tgb.datapipes.read._types import RunSource, StepEntry
from torch_tgb.datapipes.read.footer_index import check_footer_location, footer_location_ok
from torch_tgb.datapipes.read.stats import ReadStats
from torch_tgb.errors import CorruptObject
from torch_tgb.format import IntegerCast, SliceReader, SliceRun
from torch_tgb.layout import StepReads
from torch_tgb.manifest import TGBEntry

__all__ = ["MAX_RUN", "LocalRuns", "StepRun"]

#: steps taken from the poller per run at most
MAX_RUN = 1024


class StepRun:
    """Steps ``first_step .. first_step + len(self) - 1`` (TGB steps), seen at manifest ``version``.

    ``slices``: one run per piece of the ``LocalRuns``' ``reads``, in that
    order. ``read(i)`` is step ``first_step + i``'s batch: the one slice as
    read, or the slices joined by ``reads.assemble``.
    """

    __slots__ = ("cast", "first_step", "read", "slices", "version")

    def __init__(
        self, first_step: int, version: int, slices: tuple[SliceRun, ...], join: StepReads | None = None,
        *, cast: bool = False,
    ) -> None:
        self.first_step, self.version, self.slices = first_step, version, slices
        #: whether ``read`` already casts (the one slice cast as read, :meth:`SliceRun.cast_with`)
        self.cast = cast
        self.read: Callable[[int], dict[str, torch.Tensor]] = slices[0].read
        if join is not None:
            def joined(i: int) -> dict[str, torch.Tensor]:
                return join.assemble([s.read(i) for s in slices])

            self.read = joined

    def __len__(self) -> int:
        return len(self.slices[0])


class LocalRuns(BaseNode[StepRun]):
    """Runs of consecutive steps of one object, from a step source positioned at ``start_step``.

    ``source`` is a :class:`RunSource` node: the ``ManifestPoller`` of a stream
    or the ``BlockShuffle`` of an epochs read (whose runs stay inside a block).
    ``reads`` says what each step reads: the plan's reads of a step, whose
    pieces all lie in that step's own TGB (``Piece.tgb == 0``); ``StepRun.slices``
    follow its pieces, and ``reads.assemble`` joins them. ``namespace`` names
    the store in errors.
    """

    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[StepEntry],
        reader: SliceReader,
        *,
        namespace: str,
        reads: StepReads,
        start_step: int = 0,
        version: int = 0,
        max_run: int = MAX_RUN,
        names: frozenset[str] | None = None,
        every: tuple[int, int] = (1, 0),
    ) -> None:
        super().__init__()
        if max_run < 1:
            raise ValueError(f"max_run must be >= 1, got {max_run}")
        if every[0] < 1:
            raise ValueError(f"every=(stride, step) needs stride >= 1, got {every}")
        self.source: BaseNode[StepEntry] = source
        if not isinstance(source, RunSource):
            raise TypeError(f"LocalRuns reads a run source (ManifestPoller, BlockShuffle), got {type(source).__name__}")
        self._runs: RunSource = source
        if not reads.pieces or any(p.tgb != 0 for p in reads.pieces):
            raise ValueError(f"LocalRuns reads slices of each step's own TGB, got pieces {reads.pieces}")
        self.namespace = namespace
        self.reader = reader
        self.reads = reads
        # a step of one whole slice is delivered as read, or as its rows split in two views (reads.whole_rows);
        # else its slices are joined (and a labels_from key split). Either of the first two casts as it reads.
        self._whole = (len(reads.parts) == 1 and [(s.lo, s.hi) for s in reads.parts[0]] == [(0, 1)]
                       and reads.labels_from is None)
        self._one_slice = self._whole or reads.whole_rows
        self.names = names
        self._slices = tuple((p.dp, p.cp) for p in reads.pieces)
        self.start_step, self.start_version = start_step, version
        self.max_run = max_run
        #: (stride, a TGB step): the steps this node's consumer reads of each run, steps == step (mod stride);
        #: a DataLoader worker reads one in num_workers (its statistics count those, not the whole run)
        self.every = every
        self.stats = ReadStats()  # this node's own counters (the reader merges them)
        #: the reader's cast, applied as a whole step's one slice is read (None: the reader casts, or nothing)
        self.cast: IntegerCast | None = None
        # steps taken from the poller but not yet in a run: (step, version, entries, index of that step)
        self._left: tuple[int, int, list[TGBEntry], int] | None = None
        self._state: dict[str, Any] | None = None

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._left = None
        if initial_state is not None:
            self.source.reset(initial_state[self.SOURCE_KEY])
        else:
            self.source.reset(self._runs.state_at(self.start_step, self.start_version))
        self._state = self.source.state_dict()

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._state}

    def close(self) -> None:
        """Nothing runs in the background; for symmetry with RangeReader."""

    def next(self) -> StepRun:
        if self._left is None:
            step, version, entries = self._runs.next_run(self.max_run)
            self._left = (step, version, entries, 0)
        step, version, entries, at = self._left
        started = time.perf_counter()
        first = entries[at]
        key = first.key
        check_footer_location(first, step, self.namespace)
        tgbs = [(first.footer_offset, first.size)]
        for i in range(at + 1, len(entries)):
            e = entries[i]
            if e.key != key or not footer_location_ok(e):
                break  # a bad entry starts the next run: the steps before it are delivered, then it raises at its step
            tgbs.append((e.footer_offset, e.size))
        try:
            runs = self.reader.runs(key, first.total_size, tgbs, self._slices, self.names)
        except CorruptObject as e:  # the format names object/slice/tensor; add the step
            raise CorruptObject(f"{self.namespace}: step={step}: {e}") from e
        if runs is None:
            raise CorruptObject(f"{self.namespace}: object {key!r} is not a mapped local file")
        n = len(runs[0])
        # the steps after this run stay here until a later run takes them (never skipped)
        self._left = (step + n, version, entries, at + n) if at + n < len(entries) else None
        self._state = self._runs.state_at(step + n, version)
        length = sum(run.info.length for run in runs)
        useful = sum(t.length for run in runs for t in run.info.tensors)
        stride, phase = self.every
        own = range((phase - step) % stride, n, stride)  # the run's steps this consumer reads
        footer_bytes = sum(tgbs[i][1] - tgbs[i][0] for i in own)
        k = len(own)
        self.stats.fetch_latency(time.perf_counter() - started)
        self.stats.add(footer_requests=k, data_requests=k * len(runs), bytes_read=k * length + footer_bytes,
                       useful_bytes=k * useful)
        cast = self._one_slice and self.cast is not None and runs[0].cast_with(self.cast)
        return StepRun(step, version, runs, None if self._whole else self.reads, cast=cast)
