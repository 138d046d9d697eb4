"""How this rank's steps are read: one interface, two paths, chosen once per iteration.

A :class:`ReadPath` hands out this rank's steps as dicts of tensors, cast as
``ReaderOptions.dtype`` says (:meth:`ReadPath.cast`, the one place a host-side
cast happens), and knows the position after the last step it handed out and
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

import numpy as np
import torch
from torch.utils.data import get_worker_info

from torch_tgb.consumer._epochs import EpochOrder
from torch_tgb.consumer._keys import KeyPlan
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
from torch_tgb.distributed.consistency import ConsistencyChecker, keys_digest
from torch_tgb.errors import CorruptObject, TGBError
from torch_tgb.format import Contract, IntegerCast, SliceReader, coded_keys
from torch_tgb.layout import LABELS_KEY, ReadPlan, offsets_key
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import DATASET_KEY
from torch_tgb.storage import ObjectStore
from torch_tgb.transforms.derive import (
    SEQ_LENS_KEY,
    derived_arrays,
    ignored_labels,
    padding_at,
    padding_problem,
    seq_lens_problem,
)
from torch_tgb.transforms.packing import IGNORE_INDEX

__all__ = ["META_KEY", "PathStart", "ReadPath", "RunPath", "StepPath", "open_path", "takes_runs", "uncast_keys"]

#: extra int64 tensor (step, sub_step, sub_steps, keys digest) a worker adds for the loader's check
META_KEY = "__tgb_meta__"

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class PathStart:
    """Where a path starts: counting from ``origin``, or exactly at ``exact`` (a same-setting restore)."""

    origin: Cursor
    exact: Position | None
    worker: int
    num_workers: int


def uncast_keys(plan: ReadPlan) -> frozenset[str]:
    """What a ``dtype`` cast leaves alone: ragged keys and their offsets (the cast is for dense token ids)."""
    return frozenset(plan.ragged) | {offsets_key(k) for k in plan.ragged}


def takes_runs(options: ReaderOptions, plan: ReadPlan, *, mapped_local: bool, num_workers: int) -> bool:
    """Whether the run path serves a read: all of these hold, else the step path does.

    One process reads (no DataLoader workers, or one), the namespace is local
    and read through mappings in the consumer's thread, each consumer step reads
    slices of its own TGB only (one TGB per step, one step per TGB: the written
    dp, or a merge of slices, any cp split), no consistency check runs (the
    check, and its step metadata, live on the step path), and corrupt steps
    raise (``on_corrupt="skip_step"`` judges every step on the step path).
    """
    return (
        options.runs
        and not options.check_consistency
        and options.on_corrupt == "raise"  # a skipping reader reads step by step: each step judged alone
        and num_workers == 1
        and mapped_local
        and options.read_mode == "mmap"
        and options.inline_local
        and plan.tgbs_per_step == 1
        and plan.steps_per_tgb == 1
    )


class ReadPath(ABC):
    """This rank's steps, one dict of tensors each, from a positioned :class:`Project`.

    :meth:`finish` turns a step as read into the step handed out: the keys
    derived from ``seq_lens`` (``keys``, :mod:`torch_tgb.consumer._keys`), only
    the keys asked for, and the one host-side cast.
    """

    def __init__(self, project: Project, dtype: torch.dtype | None, keys: KeyPlan, sources: list[ReadStats]) -> None:
        self.project = project
        self.dtype = dtype
        self.keys = keys
        self.keep = uncast_keys(project.plan)
        self.delivered = ReadStats()  # steps handed out and the time spent waiting for them
        self._sources = sources  # the nodes' own counters
        self._derives = keys.mask_labels or bool(keys.derive)
        self._label_dtype = torch.int64 if dtype is None else dtype
        if keys.mask_labels and (not self._label_dtype.is_signed or self._label_dtype == torch.bool):
            raise ValueError(f"dtype={dtype} cannot hold the -100 of masked labels; pass a signed dtype "
                             "(e.g. torch.int64) or ReaderOptions(derive=()) for the bare shift")
        # masked labels are made at the delivered dtype already (derive): the cast leaves them alone
        uncast = self.keep | {LABELS_KEY} if keys.mask_labels and self._label_dtype == dtype else self.keep
        self._cast = None if dtype is None else IntegerCast(dtype, uncast)
        #: a step as read -> the step handed out (:meth:`finish_step`, or just its cast where that is all it does)
        self.finish: Callable[[Batch], Batch] = self.finish_step
        #: nothing derived or dropped: a step as read needs only the cast
        self.plain = not self._derives and keys.deliver is None
        if self.plain and self._cast is not None:
            self.finish = self._cast
        #: a step already cast as read (a run path's one slice) -> the step handed out (None: as it is)
        self.finish_cast: Callable[[Batch], Batch] | None = (
            None if self.plain else self._finish_cast if self._derives else self.select)
        self._lens_offsets = offsets_key(SEQ_LENS_KEY)
        self._tokens_key = project.plan.written.labels_from or LABELS_KEY
        #: whether the tokens the rows' lengths call padding are judged (rows of tokens: labels_from)
        self._padded = project.plan.written.labels_from is not None
        #: delivered tokens per row -> (the rows' seq_len, the token ranges this rank holds)
        self._geometry: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {}
        #: the last rows' (key, ignored labels, derived keys, padding positions): alike every step when unpacked
        self._last_rows: tuple[tuple[int, bytes, bytes], np.ndarray | None, dict[str, np.ndarray],
                               tuple[np.ndarray, np.ndarray, np.ndarray] | None] | None = None

    def finish_step(self, tensors: Batch) -> Batch:
        """Derived keys, only the keys asked for, the cast: a step as read -> the step handed out."""
        if self._derives:
            tensors = self.derive(tensors)
        if self.keys.deliver is not None:
            tensors = self.select(tensors)
        return tensors if self._cast is None else self._cast(tensors)

    def _finish_cast(self, tensors: Batch) -> Batch:
        """:meth:`finish_step` of a step whose stored tensors were cast as read: only the derived keys are left to cast.

        Derivation reads ``seq_lens`` (never cast) and the tokens' shape only, so
        it does not mind whether the tokens were cast; masked labels are copied
        at the labels' dtype either way.
        """
        tensors = self.derive(tensors)
        if self.keys.derive and self._cast is not None:
            tensors.update(self._cast({name: tensors[name] for name in self.keys.derive}))
        return tensors if self.keys.deliver is None else self.select(tensors)

    def select(self, tensors: Batch) -> Batch:
        """Only the keys asked for (``ReaderOptions(keys=)``)."""
        deliver = self.keys.deliver
        return tensors if deliver is None else {k: v for k, v in tensors.items() if k in deliver}

    def derive(self, tensors: Batch) -> Batch:
        """Masked ``labels`` and the keys asked for, from the rows' ``seq_lens`` (:mod:`torch_tgb.transforms.derive`).

        :class:`CorruptObject` if the stored lengths cannot be the rows' (:func:`seq_lens_problem`), or
        call tokens padding that are not (:func:`padding_problem`).
        """
        lengths, offsets = tensors[SEQ_LENS_KEY].numpy(), tensors[self._lens_offsets].numpy()
        tokens = tensors[self._tokens_key]
        width = int(tokens.shape[1])
        geometry = self._geometry.get(width)
        if geometry is None:
            seq_len = self.project.plan.seq_len_of(width)
            geometry = self._geometry[width] = (seq_len, self.project.plan.token_ranges(seq_len))
        seq_len, ranges = geometry
        ignored, derived, padding = self._rows_derived(lengths, offsets, seq_len, ranges)
        if padding is not None:
            problem = padding_problem(tokens.numpy(), padding, self._tokens_key)
            if problem is not None:
                raise CorruptObject(f"stored {SEQ_LENS_KEY!r}: {problem}")
        out = dict(tensors)
        if ignored is not None:
            shift = tensors[LABELS_KEY]
            if shift.dtype == self._label_dtype and not shift.dtype.is_floating_point:  # cast as read: numpy's copy
                array = shift.numpy().copy()
                array.reshape(-1)[ignored] = IGNORE_INDEX
                labels = torch.from_numpy(array)
            else:
                labels = shift.to(self._label_dtype, memory_format=torch.contiguous_format, copy=True)
                if labels.dtype.is_floating_point:  # bfloat16 has no numpy twin
                    labels.view(-1).index_fill_(0, torch.from_numpy(ignored), IGNORE_INDEX)
                else:
                    labels.numpy().reshape(-1)[ignored] = IGNORE_INDEX
            out[LABELS_KEY] = labels
        for name, array in derived.items():  # a copy each step: a training step may write into what it got
            out[name] = torch.from_numpy(array.copy())
        return out

    def _rows_derived(
        self, lengths: np.ndarray, offsets: np.ndarray, seq_len: int, ranges: tuple[tuple[int, int], ...]
    ) -> tuple[np.ndarray | None, dict[str, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
        """The rows' lengths judged; the labels they ignore (None: not masked), the keys derived from them,
        and where they leave padding (None: not judged).

        Remembered for the last rows seen: unpacked and concat-and-chunk rows are alike every step.
        """
        key = (seq_len, lengths.tobytes(), offsets.tobytes())
        if self._last_rows is None or self._last_rows[0] != key:
            problem = seq_lens_problem(lengths, offsets, seq_len)
            if problem is not None:
                raise CorruptObject(f"stored {SEQ_LENS_KEY!r}: {problem}")
            ignored = ignored_labels(lengths, offsets, seq_len, ranges) if self.keys.mask_labels else None
            derived = derived_arrays(lengths, offsets, seq_len, ranges, self.keys.derive) if self.keys.derive else {}
            padding = padding_at(lengths, offsets, seq_len, ranges) if self._padded else None
            self._last_rows = (key, ignored, derived, padding)
        return self._last_rows[1], self._last_rows[2], self._last_rows[3]

    @abstractmethod
    def __iter__(self) -> Iterator[Batch]: ...

    @abstractmethod
    def position(self) -> Position:
        """The position after the last step handed out (before the first, until one is)."""

    def stats(self) -> ConsumerStats:
        return merge_stats([s.snapshot() for s in (self.delivered, *self._sources)])

    def close(self) -> None:
        """Stop background work; the position stays readable."""


class StepPath(ReadPath):
    """The step-by-step pipeline: one ``ReadTask`` per step, fetched, checked and assembled."""

    def __init__(
        self, project: Project, store: ObjectStore, slices: SliceReader, options: ReaderOptions, keys: KeyPlan,
        sources: list[ReadStats], *, emit_meta: bool,
    ) -> None:
        skip = options.on_corrupt == "skip_step"
        self.footers = FooterIndex(project, store, cache_size=options.footer_cache, lookahead=options.footer_lookahead,
                                   slices=slices, errors=options.errors, contract=slices.contract, skip_errors=skip)
        self.reader = RangeReader(self.footers, store, prefetch=options.prefetch, verify=options.verify,
                                  inline_local=options.inline_local, slices=slices, errors=options.errors,
                                  names=keys.read, skip_errors=skip)
        self.skips = Skips(store, namespace=store.url) if skip else None
        super().__init__(project, options.dtype, keys, [*sources, self.footers.stats, self.reader.stats])
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
                delivered.delivered(clock() - started, steps=0)
                if checker is not None:
                    checker.check_end()
                return
            delivered.delivered(clock() - started)
            task = batch.task
            if checker is not None:
                checker.check(task.cursor, task.keys)
            try:
                if batch.error is not None:
                    raise batch.error
                tensors = self.finish(batch.tensors)
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
                 store: ObjectStore, options: ReaderOptions, keys: KeyPlan, sources: list[ReadStats]) -> None:
        at = project.position()  # the Project only counts positions here (it validated the origin)
        self.runs = LocalRuns(steps, slices, namespace=store.url, reads=project.plan.reads(0),
                              start_step=at.cursor.step, version=at.cursor.version, names=keys.read)
        super().__init__(project, options.dtype, keys, [*sources, self.runs.stats])
        # a run of one whole slice (or its rows' two views) casts as it reads: one copy of the rows for both
        # views, and masked labels then copy the cast shift (derivation reads only the uncast seq_lens)
        self.runs.cast = self._cast
        self._run: StepRun | None = None
        self._done = 0
        self.runs.reset(None)

    def position(self) -> Position:
        run = self._run
        if run is None or not self._done:
            return self.project.position()
        step = run.first_step + self._done  # TGB step == consumer step + origin under a 1:1 plan
        return self.project.position_at(step - self.project.cursor(0).step, run.version)

    def __iter__(self) -> Iterator[Batch]:
        runs, delivered, clock, finish = self.runs, self.delivered, time.perf_counter, self.finish
        while True:
            started = clock()
            try:
                run = next(runs)
            except StopIteration:
                delivered.delivered(clock() - started, steps=0)
                return
            read, step = run.read, run.first_step
            fin: Callable[[Batch], Batch] | None
            if run.cast:  # cast as read: what is left is deriving and choosing the keys
                fin = self.finish_cast
            else:
                fin = None if self.plain and self._cast is None else finish
            for i in range(len(run)):
                try:
                    tensors = read(i) if fin is None else fin(read(i))
                except CorruptObject as e:  # the format names object/slice/tensor; add the step
                    raise CorruptObject(f"{runs.namespace}: step={step + i}: {e}") from e
                # only once step i is in hand: a failed read leaves the position after the last delivered step
                self._run, self._done = run, i + 1
                delivered.delivered(clock() - started)
                yield tensors
                started = clock()


def open_path(
    store: ObjectStore, manifest: Manifest, plan: ReadPlan, keys: KeyPlan, options: ReaderOptions,
    order: EpochOrder | None, start: PathStart, *, emit_meta: bool = False,
) -> tuple[ReadPath, int | None]:
    """The read path of ``plan`` for this iteration, positioned at ``start``; and ``N`` of an epochs read (None: a stream)."""
    steps: ManifestPoller | BlockShuffle
    if order is None:
        steps = ManifestPoller(manifest, timeout=options.timeout, policy=options.poll, stop_step=options.stop_step,
                               namespace=store.url)
        sources = [steps.stats]
    else:
        steps = BlockShuffle(manifest, block_size=order.order_block, seed=order.seed, epoch=order.first_epoch,
                             epochs=order.epochs)
        sources = []
    origin = start.origin if start.exact is None else start.exact.origin
    project = Project(steps, plan, origin=origin, worker=start.worker, num_workers=start.num_workers,
                      start=start.exact)
    # one open-object cache for footers and slices: each object is opened, checked and mapped once, and
    # every footer held to the namespace's contract (dataset.json) once, at parse, on either path
    slices = SliceReader(store, verify=options.verify, mode=options.read_mode, cache_size=options.open_objects,
                         read_whole_below=options.small_object_bytes, contract=Contract(plan.written, keys.schema))
    mapped_local = store.local_path(DATASET_KEY) is not None
    path: ReadPath
    runs = takes_runs(options, plan, mapped_local=mapped_local, num_workers=start.num_workers)
    if runs and not coded_keys(keys.schema):  # compressed: the step path decodes on its read-ahead threads
        path = RunPath(project, steps, slices, store, options, keys, sources)
    else:
        path = StepPath(project, store, slices, options, keys, sources, emit_meta=emit_meta)
    return path, None if order is None else int(steps.num_steps)  # type: ignore[union-attr]  # BlockShuffle
