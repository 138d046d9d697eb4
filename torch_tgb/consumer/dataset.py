"""TGBDataset: this rank's slice of every step, as an IterableDataset.

Iterating builds the pipeline ``ManifestPoller -> Project -> FooterIndex ->
RangeReader`` (torch_tgb.datapipes) in the process that iterates, so a
DataLoader worker opens its own store connection. Inside a DataLoader worker
``w`` of ``W`` the dataset yields consumer steps ``w, w+W, ...`` (counted from
where it started); the loader's in-order round robin restores the sequence.

State (``state_dict``, JSON): ``"tgb_cursor"`` is the next step this dataset
(or this worker) will deliver, plus what is needed to continue exactly in the
same setting (origin of the step count, index, worker, plan, mesh). Loading a
state taken in another setting (another mesh, dp_split or worker count, or a
whole StatefulDataLoader state) continues from the canonical cursor, the
smallest one in it: that is exact at step boundaries, and raises LayoutError
for a position inside a TGB the new plan cannot express.

The step sequence is one stream: iterating again continues where the last
iteration stopped (at the seal of a finished stream it yields nothing);
``load_state_dict({"tgb_cursor": Cursor(0).to_json()})`` starts over.

Epochs over a sealed namespace (``shuffle=True``, or ``epochs`` other than 1):
the pipeline reads ``datapipes.BlockShuffle`` instead of the manifest stream,
positions count through the epochs, ``set_epoch(e)`` starts epoch ``e`` and
the state keeps the position under ``"tgb_epochs"`` (``consumer/_epochs.py``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from torch_tgb.consumer._epochs import EPOCHS_KEY, EpochOrder, canonical_state, epoch_cursor_of, next_step_of
from torch_tgb.consumer._open import wait_for_dataset
from torch_tgb.consumer.options import DP_SPLITS, ReaderOptions
from torch_tgb.cursor import CURSOR_KEY, Cursor, cursor_of
from torch_tgb.datapipes._types import Position, ReadTask
from torch_tgb.datapipes.footer_index import FooterIndex
from torch_tgb.datapipes.local_runs import LocalRuns, StepRun
from torch_tgb.datapipes.poller import ManifestPoller
from torch_tgb.datapipes.project import Project, cursor_at
from torch_tgb.datapipes.range_reader import RangeReader
from torch_tgb.datapipes.shuffle import BlockShuffle
from torch_tgb.datapipes.stats import ConsumerStats, ReadStats
from torch_tgb.distributed.consistency import ConsistencyChecker
from torch_tgb.errors import CorruptObject, LayoutError, ManifestError
from torch_tgb.format import SliceReader, cast_integers
from torch_tgb.layout import Layout, Mesh, ReadPlan, StepReads, plan_reads
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import DATASET_KEY
from torch_tgb.storage import ObjectStore, open_store

__all__ = ["META_KEY", "ReaderOptions", "TGBDataset", "canonical_state", "next_step_of"]


#: extra int64 tensor (step, sub_step, sub_steps, keys digest) a worker adds for the loader's check
META_KEY = "__tgb_meta__"


class TGBDataset(IterableDataset):
    """One item per step: this rank's tensors (dict[str, Tensor]) of that step.

    - ``mesh``: this rank's place (``Mesh(dp_rank, dp_size, cp_rank, cp_size)``);
      ``None``: ``Mesh.from_env()``.
    - ``prefetch``: steps read ahead on a background thread (remote stores).
    - ``timeout``: seconds one wait for a new commit may last before
      :class:`DataTimeout`; ``None`` (default): no limit. Waiting is never
      silent: a warning every ``options.poll.warn_every`` seconds names the
      namespace, the step, the last version and the producers' marks.
    - ``dp_split``: with fewer dp ranks than the written layout, ``"merge"``
      (several slices per step) or ``"spread"`` (one slice per step).
    - ``check_consistency``: all-gather (step, keys) every step and raise
      :class:`ConsistencyError` when ranks disagree.
    - ``options``: :class:`ReaderOptions` (``stop_step`` ends early, ``poll``
      the waiting policy, the rest tunes the read path).

    Iteration ends at the seal (or ``options.stop_step``); :attr:`step` is
    the next step to deliver.
    """

    def __init__(
        self,
        ns: Any,
        mesh: Mesh | None = None,
        prefetch: int = 4,
        timeout: float | None = None,
        storage_options: Mapping[str, Any] | None = None,
        *,
        dp_split: str = "merge",
        check_consistency: bool = False,
        options: ReaderOptions = ReaderOptions(),
        shuffle: bool = False,
        block_size: int = 64,
        seed: int = 0,
        epochs: int | None = 1,
    ) -> None:
        """``shuffle``/``block_size``/``seed``/``epochs``: read a sealed namespace in (block-shuffled) epochs.

        ``epochs=None`` repeats forever. With ``shuffle=False`` and ``epochs=1``
        (the default) the namespace is read as a stream, sealed or not.
        """
        super().__init__()
        if dp_split not in DP_SPLITS:
            raise LayoutError(f"dp_split must be one of {DP_SPLITS}, got {dp_split!r}")
        if prefetch < 0 or (timeout is not None and timeout < 0):
            raise ValueError(f"prefetch and timeout must be >= 0, got {prefetch=} {timeout=}")
        self.ns = ns
        self.mesh = mesh if mesh is not None else Mesh.from_env()
        self.prefetch = prefetch
        self.timeout = timeout
        self.storage_options = dict(storage_options or {})
        self.dp_split = dp_split
        self.check_consistency = check_consistency
        self.options = options
        self.emit_meta = False  # set by tgb.DataLoader: workers hand metadata to the main process
        self._order = EpochOrder(shuffle, block_size, seed, epochs) if shuffle or epochs != 1 else None
        if self._order is not None and options.stop_step is not None:
            raise ValueError("options.stop_step bounds a stream read; an epochs read ends after `epochs` epochs")
        self._num_steps: int | None = None  # epochs mode: steps of the sealed namespace, read once
        self._start: Cursor | None = Cursor(0) if self._order is None else None  # None: the start of the first epoch
        self._restore: dict[str, Any] | None = None  # exact same-setting state, checked at iteration
        self._reader: RangeReader | None = None
        self._delivered: _Delivered | None = None  # while iterating: what tells the position after the last step
        self._layout: dict[str, Any] | None = None
        self._stats = ReadStats()

    # --- pickling for DataLoader workers: no live pipeline travels ------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None
        state["_delivered"] = None
        state["_stats"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stats = ReadStats()

    # --- state ---------------------------------------------------------------------

    def _setting(self) -> dict[str, Any]:
        m = self.mesh
        worker, workers = self._current_worker()
        return {
            "mesh": [m.dp_rank, m.dp_size, m.cp_rank, m.cp_size],
            "dp_split": self.dp_split,
            "worker": worker,
            "num_workers": workers,
        }

    @staticmethod
    def _current_worker() -> tuple[int, int]:
        info = get_worker_info()
        return (0, 1) if info is None else (info.id, info.num_workers)

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position; ``"tgb_cursor"`` is the first step this reader may still read.

        For a stream that is the next step to deliver; in epochs mode it is step
        0 (any step may be read again) and the position is under ``"tgb_epochs"``.
        """
        state: dict[str, Any] = dict(self._setting())
        position = self._position()
        if self._order is not None:
            cursor = Cursor.from_json(position[CURSOR_KEY])
            state[EPOCHS_KEY] = self._order.to_json(cursor, self._steps_per_epoch())
            position[CURSOR_KEY] = Cursor(0, cursor.version).to_json()
        state.update(position)
        state["stats"] = self.stats().to_json()
        return state

    def set_epoch(self, epoch: int) -> None:
        """Start (the next iteration) at the beginning of ``epoch``; reads ``epochs`` epochs from there.

        A stream read (``shuffle=False, epochs=1``) has one pass and no epochs:
        there it changes nothing (training frameworks call it at every epoch start),
        with a warning for ``epoch > 0``.
        """
        if self._order is None:
            if epoch != 0:
                warnings.warn(
                    f"set_epoch({epoch}) on a stream read changes nothing: the stream is one pass (HF Trainer, "
                    "accelerate and other frameworks call set_epoch at every epoch start). To read a sealed "
                    "namespace in epochs, pass epochs= (and shuffle=True) to the reader",
                    stacklevel=2,
                )
            return
        if self._reader is not None:
            self._reader.close()
            self._reader = None
            self._delivered = None
        self._order = EpochOrder(self._order.shuffle, self._order.block_size, self._order.seed, self._order.epochs, epoch)
        self._start = None
        self._restore = None

    def _steps_per_epoch(self) -> int:
        """``N`` of an epochs read (the sealed namespace's steps), read once and carried to workers."""
        if self._num_steps is None:
            store = open_store(self.ns, self.storage_options or None)
            try:
                head = Manifest(store).head()
                if not head.sealed:
                    raise ManifestError(
                        f"{store.url}: shuffle/epochs read a sealed namespace; version {head.version} "
                        f"({head.num_steps} steps) is not sealed"
                    )
                self._num_steps = int(head.num_steps)
            finally:
                if not isinstance(self.ns, ObjectStore):
                    store.close()
        return self._num_steps

    def _start_cursor(self) -> Cursor:
        if self._start is not None:
            return self._start
        assert self._order is not None  # a stream always has a start cursor
        return Cursor(self._order.first_epoch * self._steps_per_epoch())

    @property
    def step(self) -> int:
        """The next step this dataset delivers, in TGB steps (what a checkpoint of it resumes at)."""
        return Cursor.from_json(self._position()[CURSOR_KEY]).step

    def _position(self) -> dict[str, Any]:
        """``tgb_cursor`` with the origin/index/plan it was derived from."""
        if self._delivered is not None:
            pos = self._delivered.position()
            return {CURSOR_KEY: pos.cursor.to_json(), "origin": pos.origin.to_json(), "index": pos.index, "plan": pos.plan}
        if self._restore is not None:
            return {k: self._restore[k] for k in (CURSOR_KEY, "origin", "index", "plan")}
        else:
            # Not started. Worker 0 (or a dataset outside a DataLoader) starts at the start
            # cursor under any plan; worker w > 0 starts w steps later, which needs the plan,
            # so the written layout is read now: a worker's initial state must not claim an
            # earlier step than its own first one.
            index = self._current_worker()[0]
            start = self._start_cursor()
            if index == 0:
                return {CURSOR_KEY: start.to_json(), "origin": start.to_json()}
            layout = self._resolve_layout()
            plan_obj = plan_reads(layout, self.mesh, dp_split=self.dp_split)
            plan = {"tgbs_per_step": plan_obj.tgbs_per_step, "steps_per_tgb": plan_obj.steps_per_tgb}
            cursor = cursor_at(start, index, version=start.version, **plan)
            return {CURSOR_KEY: cursor.to_json(), "origin": start.to_json(), "index": index, "plan": plan}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (a TGBDataset, worker or whole loader state)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
            self._delivered = None
        found = epoch_cursor_of(state)
        if self._order is None:
            if found is not None:
                raise LayoutError(
                    f"the state was taken reading epochs ({dict(found[1])}); pass the same shuffle/epochs settings"
                )
            cursor = cursor_of(state)
        else:
            if found is None:
                raise LayoutError("the state was taken reading a stream; an epochs read cannot continue from it")
            cursor, saved = found
            self._order.check_same_order(saved)
            self._order = EpochOrder(
                self._order.shuffle, self._order.block_size, self._order.seed, self._order.epochs,
                int(saved.get("first_epoch", 0)),
            )
        self._start = cursor
        self._restore = None
        if CURSOR_KEY in state and all(k in state for k in ("origin", "index", "plan")):
            keys = (CURSOR_KEY, "origin", "index", "plan", "mesh", "dp_split", "worker", "num_workers")
            self._restore = {k: state[k] for k in keys}
            self._restore[CURSOR_KEY] = cursor.to_json()  # in epochs mode: the position, not step 0

    # --- iteration -------------------------------------------------------------

    def stats(self) -> ConsumerStats:
        return self._stats.snapshot()

    def _resolve_layout(self) -> Layout:
        """The written layout (read once, then carried to workers with the dataset)."""
        if self._layout is None:
            store, _, layout = self._open()
            store.close()
            return layout
        return Layout.from_json(self._layout)

    def _open(self) -> tuple[ObjectStore, Manifest, Layout]:
        store = open_store(self.ns, self.storage_options or None)
        if self._layout is not None:
            return store, Manifest(store), Layout.from_json(self._layout)
        manifest = Manifest(store)
        info = wait_for_dataset(store, manifest, timeout=self.timeout, poll=self.options.poll)
        self._layout = dict(info.layout)
        return store, manifest, Layout.from_json(info.layout)

    def _build(self, store: ObjectStore, manifest: Manifest, layout: Layout) -> tuple[RangeReader | LocalRuns, Project]:
        plan = plan_reads(layout, self.mesh, dp_split=self.dp_split)
        worker, workers = self._current_worker()
        setting = self._setting()
        restore = self._restore
        exact = restore is not None and all(restore.get(k) == v for k, v in setting.items()) and restore["plan"] == {
            "tgbs_per_step": plan.tgbs_per_step,
            "steps_per_tgb": plan.steps_per_tgb,
        }
        start = None
        if exact and restore is not None:
            start = Position(
                Cursor.from_json(restore[CURSOR_KEY]),
                Cursor.from_json(restore["origin"]),
                int(restore["index"]),
                plan.tgbs_per_step,
                plan.steps_per_tgb,
            )
        steps: ManifestPoller | BlockShuffle
        if self._order is None:
            steps = ManifestPoller(
                manifest,
                timeout=self.timeout,
                policy=self.options.poll,
                stop_step=self.options.stop_step,
                stats=self._stats,
                namespace=store.url,
            )
        else:
            order = self._order
            steps = BlockShuffle(
                manifest, block_size=order.order_block, seed=order.seed, epoch=order.first_epoch, epochs=order.epochs
            )
            self._num_steps = steps.num_steps
        origin = self._start_cursor() if start is None else start.origin
        project = Project(steps, plan, origin=origin, worker=worker, num_workers=workers, start=start)
        # one open-object cache for footers and slices: each object is opened, checked and mapped once
        slices = SliceReader(store, verify=self.options.verify, mode=self.options.read_mode,
                             cache_size=self.options.open_objects, read_whole_below=self.options.small_object_bytes)
        reads = self._run_reads(store, plan)
        if reads is not None:
            # the run path: the Project only counts positions (it validated the origin above)
            at = project.position()
            runs = LocalRuns(steps, slices, namespace=store.url, reads=reads,
                             start_step=at.cursor.step, version=at.cursor.version, cast=self.options.dtype,
                             stats=self._stats)
            runs.reset(None)
            return runs, project
        footers = FooterIndex(
            project,
            store,
            cache_size=self.options.footer_cache,
            lookahead=self.options.footer_lookahead,
            stats=self._stats,
            slices=slices,
            errors=self.options.errors,
        )
        reader = RangeReader(
            footers,
            store,
            prefetch=self.prefetch,
            verify=self.options.verify,
            inline_local=self.options.inline_local,
            stats=self._stats,
            slices=slices,
            errors=self.options.errors,
        )
        reader.reset(None)
        return reader, project

    def _run_reads(self, store: ObjectStore, plan: ReadPlan) -> StepReads | None:
        """What every step reads when the run path applies (see ``datapipes.local_runs``), else None.

        It applies to a read by one process (no DataLoader workers, or just one;
        a stream or epochs) of a mapped local namespace whose plan reads, per
        consumer step, slices of that step's own TGB (one TGB per step, one step
        per TGB: the written dp or a merge of slices, any cp split), with no
        consistency check (so no step metadata either: ``emit_meta`` implies
        ``check_consistency``).
        """
        o = self.options
        if not o.runs or self.check_consistency or self._current_worker()[1] != 1:
            return None
        if o.read_mode != "mmap" or not o.inline_local or plan.tgbs_per_step != 1 or plan.steps_per_tgb != 1:
            return None
        if store.local_path(DATASET_KEY) is None:
            return None
        return plan.reads(0)  # one TGB per step: every piece lies in the step's own TGB (LocalRuns checks)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        if self._reader is not None:  # an earlier iterator still open: continue from its position
            self._restore = {**self._setting(), **self._position()}
            self._reader.close()
            self._reader = None
            self._delivered = None
        store, manifest, layout = self._open()
        reader, project = self._build(store, manifest, layout)
        self._reader = reader
        self._delivered = delivered = _Delivered(project)
        try:
            if isinstance(reader, LocalRuns):
                yield from self._deliver_runs(reader, delivered)
            else:
                yield from self._deliver_steps(reader, delivered, store.url)
        finally:
            reader.close()
            if not isinstance(self.ns, ObjectStore):  # a store handed in belongs to the caller
                store.close()
            if self._reader is reader:
                # Keep the final position readable after the loop ends.
                self._restore = {**self._setting(), **self._position()}
                self._reader = None
                self._delivered = None

    def _deliver_steps(
        self, reader: RangeReader, delivered: _Delivered, namespace: str
    ) -> Iterator[dict[str, torch.Tensor]]:
        """The step-by-step pipeline: one ReadTask per step."""
        in_worker = get_worker_info() is not None
        checker = ConsistencyChecker(namespace=namespace) if self.check_consistency and not in_worker else None
        meta = self.emit_meta and in_worker
        cast = self.options.dtype
        if self.check_consistency and in_worker and not meta:
            warnings.warn(
                "check_consistency needs the main process: inside DataLoader workers it runs only "
                "under tgb.DataLoader (a plain StatefulDataLoader cannot forward the step metadata)",
                stacklevel=3,
            )
        while True:
            started = time.perf_counter()
            try:
                batch = next(reader)
            except StopIteration:
                self._stats.delivered(time.perf_counter() - started, steps=0)
                if checker is not None:
                    checker.check_end()
                return
            self._stats.delivered(time.perf_counter() - started)
            task = batch.task
            delivered.task = task  # the position is derived only when asked for (not per step)
            if checker is not None:
                checker.check(task.cursor, task.keys)
            tensors = batch.tensors
            if cast is not None:
                tensors = cast_integers(tensors, cast)
            if meta:
                from torch_tgb.distributed.consistency import keys_digest

                c = task.cursor
                tensors = dict(tensors)
                tensors[META_KEY] = torch.tensor([c.step, c.sub_step, c.sub_steps, keys_digest(task.keys)])
            yield tensors

    def _deliver_runs(self, runs: LocalRuns, delivered: _Delivered) -> Iterator[dict[str, torch.Tensor]]:
        """The run path: a run of steps of one mapped object at a time, a view (and CRC) per slice and step."""
        stats = self._stats
        clock = time.perf_counter
        while True:
            started = clock()
            try:
                run = next(runs)
            except StopIteration:
                stats.delivered(clock() - started, steps=0)
                return
            read = run.read
            step = run.first_step
            for i in range(len(run)):
                try:
                    tensors = read(i)
                except CorruptObject as e:  # the format names object/slice/tensor; add the step
                    raise CorruptObject(f"{runs.namespace}: step={step + i}: {e}") from e
                # only once step i is in hand: a failed read leaves the position after the last delivered step
                delivered.run, delivered.done = run, i + 1
                stats.delivered(clock() - started)
                yield tensors
                started = clock()


class _Delivered:
    """The position after the last delivered step, derived on demand (not per step).

    Step path: from that step's task. Run path: ``done`` steps of ``run``
    delivered (TGB steps, one per consumer step: the run path reads 1:1 plans).
    """

    __slots__ = ("done", "project", "run", "task")

    def __init__(self, project: Project) -> None:
        self.project = project
        self.task: ReadTask | None = None
        self.run: StepRun | None = None
        self.done = 0

    def position(self) -> Position:
        if self.run is not None and self.done:
            step = self.run.first_step + self.done  # TGB step == consumer step + origin under a 1:1 plan
            return self.project.position_at(step - self.project.cursor(0).step, self.run.version)
        if self.task is not None:
            return self.project.position_after(self.task)
        return self.project.position()
