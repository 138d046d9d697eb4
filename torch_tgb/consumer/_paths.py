"""How this rank's steps are read: one interface, two paths, chosen once per iteration.

A :class:`ReadPath` hands out this rank's steps as dicts of tensors, cast as
``ReaderOptions.dtype`` says (:class:`~torch_tgb.consumer._finish.Finish`, the
one place a host-side cast happens), and knows the position after the last step it handed out and
its own statistics (merged from its nodes' counters: no node shares them):

- :class:`StepPath`: ``Project -> FooterIndex -> RangeReader``
  (``datapipes.read``): any store, any plan, any number of workers; the
  consistency check and the step metadata for ``tgb.DataLoader`` live here;
- :class:`RunPath`: ``LocalRuns`` over a mapped local namespace whose steps
  read slices of their own TGB only, read by one process: a run of steps of
  one object at a time, a view (and a CRC) per slice and step.

:func:`open_path` builds the step source (the manifest stream, or the block
shuffle of an epochs read) and the :class:`Project`, and picks the path with
:func:`takes_runs`, a pure predicate. Both paths deliver the same tensors and
positions (``tests/consumer/test_runs.py`` holds them to it).
"""

from __future__ import annotations

import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from torch_tgb.consumer._epochs import EpochOrder
from torch_tgb.consumer._finish import Batch, Finish
from torch_tgb.consumer._keys import KeyPlan
from torch_tgb.consumer._open_cache import CachedView, KnownNamespace, SharedFooters
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.cursor import Cursor
from torch_tgb.datapipes.read import (
    BlockShuffle,
    ConsumerStats,
    FooterIndex,
    LocalRuns,
    ManifestPoller,
    Position,
    Project,
    RangeReader,
    ReadStats,
    ReadTask,
    StepBatch,
    StepRun,
    merge_stats,
)
from torch_tgb.consumer._skips import Skips
from torch_tgb.datapipes.read.stall import StallClock, StallPolicy
from torch_tgb.datapipes.read.stats import stall_stats
from torch_tgb.distributed.consistency import ConsistencyChecker, keys_digest
from torch_tgb.errors import CorruptObject, TGBError
from torch_tgb.format import Contract, IntegerCast, SliceReader, coded_keys
from torch_tgb.layout import LABELS_KEY, ReadPlan, offsets_key
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import DATASET_KEY
from torch_tgb.storage import ObjectStore

__all__ = ["META_KEY", "PathStart", "ReadPath", "RunPath", "StepPath", "open_path", "takes_runs"]

#: extra int64 tensor (step, sub_step, sub_steps, keys digest) a worker adds for the loader's check
META_KEY = "__tgb_meta__"



@dataclass(frozen=True)
class PathStart:
    """Where a path starts: counting from ``origin``, or exactly at ``exact`` (a same-setting restore)."""

    origin: Cursor
    exact: Position | None
    worker: int
    num_workers: int


def takes_runs(options: ReaderOptions, plan: ReadPlan, *, mapped_local: bool) -> bool:
    """Whether the run path serves a read: all of these hold, else the step path does.

    The namespace is local and read through mappings in the consumer's thread
    (with DataLoader workers, each worker reads every run and hands out its own
    steps of it: one in ``num_workers``), each consumer step reads
    slices of its own TGB only (one TGB per step, one step per TGB: the written
    dp, or a merge of slices, any cp split), no consistency check runs (the
    check, and its step metadata, live on the step path), and corrupt steps
    raise (``on_corrupt="skip_step"`` judges every step on the step path).
    """
    return (
        options.runs
        and not options.check_consistency
        and options.on_corrupt == "raise"  # a skipping reader reads step by step: each step judged alone
        and mapped_local
        and options.read_mode == "mmap"
        and options.inline_local
        and plan.tgbs_per_step == 1
        and plan.steps_per_tgb == 1
    )


class ReadPath(ABC):
    """This rank's steps, one dict of tensors each, from a positioned :class:`Project`.

    :attr:`finish` (``consumer/_finish.py``) turns a step as read into the step
    handed out: the keys derived from ``seq_lens`` (``keys``,
    :mod:`torch_tgb.consumer._keys`), only the keys asked for, and the one
    host-side cast.
    """

    def __init__(self, project: Project, options: ReaderOptions, keys: KeyPlan, sources: list[ReadStats], *,
                 stall: StallClock) -> None:
        self.project = project
        self.dtype = options.dtype
        self.keys = keys
        self.finish = Finish(project.plan, options.dtype, keys)
        self.delivered = stall  # steps handed out and the time the consumer waited for each
        self._sources = sources  # the nodes' own counters

    @abstractmethod
    def __iter__(self) -> Iterator[Batch]: ...

    @abstractmethod
    def position(self) -> Position:
        """The position after the last step handed out (before the first, until one is)."""

    def stats(self) -> ConsumerStats:
        return merge_stats([stall_stats(self.delivered), *(s.snapshot() for s in self._sources)])

    def close(self) -> None:
        """Stop background work; the position stays readable."""


class StepPath(ReadPath):
    """The step-by-step pipeline: one ``ReadTask`` per step, fetched, checked and assembled."""

    def __init__(
        self, project: Project, store: ObjectStore, slices: SliceReader, options: ReaderOptions, keys: KeyPlan,
        sources: list[ReadStats], *, emit_meta: bool, stall: StallClock,
    ) -> None:
        skip = options.on_corrupt == "skip_step"
        self.footers = FooterIndex(project, store, cache_size=options.footer_cache, lookahead=options.footer_lookahead,
                                   slices=slices, errors=options.errors, contract=slices.contract, skip_errors=skip)
        self.reader = RangeReader(self.footers, store, prefetch=options.prefetch, verify=options.verify,
                                  inline_local=options.inline_local, slices=slices, errors=options.errors,
                                  names=keys.read, skip_errors=skip)
        self.skips = Skips(store, namespace=store.url) if skip else None
        super().__init__(project, options, keys, [*sources, self.footers.stats, self.reader.stats], stall=stall)
        self.namespace = store.url
        self.check_consistency = options.check_consistency
        self.emit_meta = emit_meta
        self._task: ReadTask | None = None
        self.reader.reset(None)

    def position(self) -> Position:
        return self.project.position() if self._task is None else self.project.position_after(self._task)

    def close(self) -> None:
        self.reader.close()

    def __iter__(self) -> Iterator[Batch]:
        in_worker = get_worker_info() is not None
        checker = ConsistencyChecker(namespace=self.namespace) if self.check_consistency and not in_worker else None
        meta = self.emit_meta and in_worker
        if self.check_consistency and in_worker and not meta:
            warnings.warn(
                "check_consistency needs the main process: inside DataLoader workers it runs only "
                "under tgb.DataLoader (a plain StatefulDataLoader cannot forward the step metadata)",
                stacklevel=3,
            )
        reader, delivered, clock = self.reader, self.delivered, time.perf_counter
        while True:
            started = clock()
            try:
                batch = next(reader)
            except StopIteration:
                delivered.waited(started, clock(), steps=0)
                if checker is not None:
                    checker.check_end()
                return
            delivered.waited(started, clock())
            task = batch.task
            if checker is not None:
                checker.check(task.cursor, task.keys)
            try:
                if batch.error is not None:
                    raise batch.error
                tensors = self.finish.step(batch.tensors)
            except CorruptObject as e:  # derived from untrusted lengths: name the step (RunPath does too)
                error = e if batch.error is not None else CorruptObject(f"{self.namespace}: step={task.cursor.step}: {e}")
                if self.skips is None:
                    raise error from e
                tensors = self.skips.verdict(StepBatch(task, {}, error))
            except TGBError as e:  # a missing object of a skipping reader (RangeReader hands it on)
                if self.skips is None:
                    raise
                tensors = self.skips.verdict(StepBatch(task, {}, e))
            else:
                if self.skips is not None:  # the verdict rides in the batch: the gate drops what any rank skips
                    tensors = self.skips.verdict(StepBatch(task, tensors))
            # only once the step is in hand (the position is derived only when asked for, not per step)
            self._task = task
            if meta:
                c = task.cursor
                tensors = {**tensors, META_KEY: torch.tensor([c.step, c.sub_step, c.sub_steps, keys_digest(task.keys)])}
            yield tensors



class RunPath(ReadPath):
    """The run path: a run of steps of one mapped object at a time, a view (and CRC) per slice and step."""

    def __init__(self, project: Project, steps: ManifestPoller | BlockShuffle, slices: SliceReader,
                 store: ObjectStore, options: ReaderOptions, keys: KeyPlan, sources: list[ReadStats], *,
                 stall: StallClock) -> None:
        at = project.position()  # the Project only counts positions here (it validated the origin)
        #: a DataLoader worker hands out its own steps of each run: consumer step indices worker + k * workers
        self._worker, self._workers = project.worker, project.num_workers
        self._origin_step = project.cursor(0).step  # TGB step == consumer step + origin under a 1:1 plan
        self.runs = LocalRuns(steps, slices, namespace=store.url, reads=project.plan.reads(0),
                              start_step=at.cursor.step, version=at.cursor.version, names=keys.read,
                              every=(self._workers, self._origin_step + self._worker))
        super().__init__(project, options, keys, [*sources, self.runs.stats], stall=stall)
        # a run of one whole slice (or its rows' two views) casts as it reads: one copy of the rows for both
        # views, and masked labels then copy the cast shift (derivation reads only the uncast seq_lens)
        #: one whole slice of token rows, whose labels are derived: Finish.rows makes each step from the slice
        #: as stored (it casts the rows itself, each copy one pass from the stored bytes)
        self._whole_rows = self.runs.reads.whole_rows and self.finish.derives
        self.runs.cast = None if self._whole_rows else self.finish.cast
        self._next: tuple[int, int] | None = None  # after a step handed out: (next consumer index, its version)
        self.runs.reset(None)

    def position(self) -> Position:
        if self._next is None:
            return self.project.position()
        return self.project.position_at(*self._next)

    def _first_of(self, run: StepRun) -> int:
        """The place in ``run`` of this worker's first step (steps ``first + k * workers`` are its own)."""
        stride, phase = self.runs.every
        return (phase - run.first_step) % stride

    def _rows_of(self, run: StepRun) -> bool:
        """Whether ``run``'s steps are one whole slice of token rows whose labels are derived (``Finish.rows``)."""
        return self._whole_rows and self.finish.takes_rows(run.slices[0].info)

    def __iter__(self) -> Iterator[Batch]:
        runs, delivered, clock, finish = self.runs, self.delivered, time.perf_counter, self.finish
        while True:
            started = clock()
            try:
                run = next(runs)
            except StopIteration:
                delivered.waited(started, clock(), steps=0)
                return
            read, step = run.read, run.first_step
            fin: Callable[[Batch], Batch] | None
            if self._rows_of(run):
                read, fin = run.slices[0].read, finish.rows
            elif run.cast:  # cast as read: what is left is deriving and choosing the keys
                fin = finish.cast_step
            else:
                fin = None if finish.plain and finish.cast is None else finish.step
            workers, after = self._workers, step - self._origin_step + self._workers  # consumer index + workers
            for i in range(self._first_of(run), len(run), workers):
                try:
                    tensors = read(i) if fin is None else fin(read(i))
                except CorruptObject as e:  # the format names object/slice/tensor; add the step
                    raise CorruptObject(f"{runs.namespace}: step={step + i}: {e}") from e
                # only once step i is in hand: a failed read leaves the position after the last delivered step
                self._next = (after + i, run.version)
                delivered.waited(started, clock())
                yield tensors
                started = clock()


def open_path(
    store: ObjectStore, manifest: Manifest, plan: ReadPlan, keys: KeyPlan, options: ReaderOptions,
    order: EpochOrder | None, start: PathStart, *, emit_meta: bool = False, known: KnownNamespace | None = None,
    stall: StallPolicy | None = None,
) -> tuple[ReadPath, int | None]:
    """The read path of ``plan`` for this iteration, positioned at ``start``; and ``N`` of an epochs read (None: a stream).

    ``known``: what earlier readers in this process learnt of the namespace (``consumer/_open_cache.py``):
    the manifest is then asked through it, and the run path's footers parsed through it. ``stall``: when the
    consumer's waits are worth a warning (None: never; a DataLoader worker's, or its loader's dataset's, are not
    the training thread's).
    """
    clock = StallClock(stall if get_worker_info() is None else None, what=store.url)
    view: Manifest | CachedView = manifest if known is None else CachedView(manifest, known)
    steps: ManifestPoller | BlockShuffle
    if order is None:
        steps = ManifestPoller(view, timeout=options.timeout, policy=options.poll, stop_step=options.stop_step,
                               namespace=store.url)
        sources = [steps.stats]
    else:
        steps = BlockShuffle(view, block_size=order.order_block, seed=order.seed, epoch=order.first_epoch,
                             epochs=order.epochs)
        sources = []
    origin = start.origin if start.exact is None else start.exact.origin
    project = Project(steps, plan, origin=origin, worker=start.worker, num_workers=start.num_workers,
                      start=start.exact)
    # one open-object cache for footers and slices: each object is opened, checked and mapped once, and
    # every footer held to the namespace's contract (dataset.json) once, at parse, on either path
    settings: dict[str, Any] = dict(verify=options.verify, mode=options.read_mode, cache_size=options.open_objects,
                                    read_whole_below=options.small_object_bytes,
                                    contract=Contract(plan.written, keys.schema))
    slices = SliceReader(store, **settings) if known is None else SharedFooters(store, known, **settings)
    mapped_local = store.local_path(DATASET_KEY) is not None
    path: ReadPath
    runs = takes_runs(options, plan, mapped_local=mapped_local)
    if runs and not coded_keys(keys.schema):  # compressed: the step path decodes on its read-ahead threads
        path = RunPath(project, steps, slices, store, options, keys, sources, stall=clock)
    else:
        path = StepPath(project, store, slices, options, keys, sources, emit_meta=emit_meta, stall=clock)
    return path, None if order is None else int(steps.num_steps)  # type: ignore[union-attr]  # BlockShuffle
