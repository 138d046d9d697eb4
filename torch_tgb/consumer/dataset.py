"""TGBDataset: this rank's slice of every step, as an IterableDataset.

Iterating opens the namespace in the process that iterates (a DataLoader
worker opens its own store connection) and reads through the one
:class:`~torch_tgb.consumer._paths.ReadPath` chosen for the iteration (the
step path, or the run path of a mapped local read). Inside a DataLoader worker
``w`` of ``W`` the dataset yields consumer steps ``w, w+W, ...`` (counted from
where it started); the loader's in-order round robin restores the sequence.

State (``state_dict``, JSON; :mod:`torch_tgb.consumer._state`): the next step
this dataset (or this worker) delivers, plus what continues exactly in the
same setting. Loading a state taken in another setting (another mesh,
dp_split or worker count, or a whole StatefulDataLoader state) continues from
the canonical cursor, the smallest one in it: exact at step boundaries, a
LayoutError for a position inside a TGB the new plan cannot express.

The step sequence is one stream: iterating again continues where the last
iteration stopped; ``load_state_dict({"tgb_cursor": Cursor(0).to_json()})``
(or ``restart()``) starts over. Epochs over a sealed namespace
(``shuffle=True``, or ``epochs`` other than 1) read
``datapipes.read.BlockShuffle`` instead of the manifest stream; positions count
through the epochs and ``set_epoch(e)`` starts epoch ``e``. A sealed namespace
is also a finite dataset (``consumer/_passes.py``): ``len()`` is one pass for
this rank, and a stream read whose iteration begins at the end of its pass
reads the next pass (as an unshuffled epoch).

``expect=`` (the data contract, ``consumer/_contract.py``) is compared with the
namespace's metadata before the first step and rides in the state. Frameworks
that wrap the dataset in loaders of their own are watched for where that
would train wrong data (``consumer/_accelerate.py``, :meth:`TGBDataset.__iter__`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch
from torch.utils.data import IterableDataset, get_worker_info
from typing_extensions import Unpack

from torch_tgb.consumer._accelerate import refuse_accelerate_wrapping
from torch_tgb.consumer._contract import EXPECT_KEY, check_contract, merge_expectations, saved_expectation
from torch_tgb.consumer._epochs import EpochOrder
from torch_tgb.consumer._grouping import ScheduleStep, scheduled_length, scheduled_steps  # batch_schedule (#46)
from torch_tgb.consumer._identity import ReadSource, pin_view
from torch_tgb.consumer._keys import KeyPlan, plan_keys
from torch_tgb.consumer._open import open_namespace, sealed_steps
from torch_tgb.consumer._written import Written
from torch_tgb.consumer._open_cache import KnownNamespace
from torch_tgb.consumer._passes import sealed_namespace, steps_left
from torch_tgb.consumer._paths import PathStart, ReadPath, open_path
from torch_tgb.consumer._skips import SkipCount, gate
from torch_tgb.consumer._state import ReaderState, Setting, start_of
from torch_tgb.consumer.options import ReaderOptions, ReadSettings
from torch_tgb.cursor import Cursor, reader_states
from torch_tgb.distributed.agreement import StepAgreement
from torch_tgb.datapipes.read import ConsumerStats, Position, merge_stats
from torch_tgb.datapipes.read.project import cursor_at
from torch_tgb.errors import FrameworkError, LayoutError
from torch_tgb.format import ragged_keys
from torch_tgb.layout import Mesh, ReadPlan, plan_reads
from torch_tgb.manifest import Manifest
from torch_tgb.storage import ObjectStore

__all__ = ["STATS_KEY", "TGBDataset"]

_T = TypeVar("_T")

#: where a DataLoader worker's state carries its read statistics to the main process
STATS_KEY = "stats"


class TGBDataset(IterableDataset[dict[str, torch.Tensor]]):
    """One item per step: this rank's tensors (dict[str, Tensor]) of that step.

    ``mesh``: this rank's place (``Mesh(dp_rank, dp_size, cp_rank, cp_size)``;
    ``None``: ``Mesh.from_env()``). ``storage_options`` open ``ns`` (fsspec).
    Everything else is a :class:`ReaderOptions` field, given as ``options=`` or
    as keyword arguments (``prefetch=8, shuffle=True, ...``; ``expect={...}``: the
    data contract). Iteration ends at the seal (or ``options.stop_step``); :attr:`step`
    is the next step to deliver; ``len()`` is one pass once the namespace is sealed.
    """

    def __init__(
        self, ns: str | ObjectStore, mesh: Mesh | None = None, *, storage_options: Mapping[str, Any] | None = None,
        options: ReaderOptions | None = None, **settings: Unpack[ReadSettings],
    ) -> None:
        super().__init__()
        self.ns = ns
        self.mesh = mesh if mesh is not None else Mesh.from_env()
        self.storage_options = dict(storage_options or {})
        self.options = o = (options or ReaderOptions()).with_settings(settings)
        self.emit_meta = False  # set by tgb.DataLoader: workers hand step metadata to the main process
        self._order = self._initial_order()
        self._num_steps: int | None = None  # steps of the namespace once it is sealed (epochs, passes), read once
        self._start: Cursor | None = None if self._order else Cursor(0)  # None: the start of the first epoch
        self._restore: ReaderState | None = None  # an exact same-setting state, used if the setting matches
        #: steps skipped by agreement so far (on_corrupt="skip_step"), counted where the ranks agree
        self._skip_count = SkipCount(max_skipped=self.options.max_skipped, namespace=str(ns))
        self._written: Written | None = None  # dataset.json: layout, schema, metadata, identity
        self._expect = o.expect  # the data contract: this reader's, and a loaded state's (consumer/_contract.py)
        self._path: ReadPath | None = None  # while iterating
        self.batch_step: ScheduleStep | None = None  # batch_schedule: the training step last handed out (#46)
        self._closed_stats = ConsumerStats()  # of the iterations before this one
        # Set by tgb.DataLoader (consumer/loader.py): it owns this dataset; it is creating an iterator now
        # (a worker's copy keeps the flag); a state was loaded and it has not iterated since.
        self._owned = False
        self._by_loader = False
        self._ring_slots = 0  # slots of each worker's step ring (consumer/_step_ring.py), set by its loader
        self._restored = False
        self._read = ReadSource(str(getattr(ns, "url", ns)))  # what it read (consumer/_identity.py)

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers get the settings and position, no live path
        return {**self.__dict__, "_path": None, "_closed_stats": ConsumerStats()}

    # --- position and state ----------------------------------------------------

    def _setting(self) -> Setting:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return Setting.of(self.mesh, self.options.dp_split, worker, workers)

    def _state(self) -> ReaderState:
        setting = self._setting()
        if self._path is not None:
            at, exact = self._path.position(), True
        elif self._restore is not None and self._restore.setting == setting:
            at, exact = self._restore.at, True
        else:  # not started: worker w > 0 starts w steps later, which needs the written layout's plan
            start = self._start_cursor()
            at, exact = Position(start, start, 0, 1, 1), False
            if setting.worker > 0:
                plan = self._plan()
                ratios = {"tgbs_per_step": plan.tgbs_per_step, "steps_per_tgb": plan.steps_per_tgb}
                cursor = cursor_at(start, setting.worker, version=start.version, **ratios)
                at, exact = Position(cursor, start, setting.worker, plan.tgbs_per_step, plan.steps_per_tgb), True
        num_steps = self._steps_per_epoch() if self._order is not None else 0
        return ReaderState(setting, at, exact, self._order, num_steps, self._read.state(at.cursor.version))

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position; ``"tgb_cursor"`` is the first step this reader may still read.

        Inside a DataLoader worker it also carries the worker's read statistics
        under ``"stats"`` (the loader collects them and leaves them out of its own state).
        """
        state = self._state().to_json()
        if self._expect:
            state[EXPECT_KEY] = dict(self._expect)
        if get_worker_info() is not None:
            state[STATS_KEY] = self.stats().to_json()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: a TGBDataset state, or a whole StatefulDataLoader state.

        A state that carries a data contract (``expect=`` of the reader that saved it) is
        checked against this namespace now: ``SchemaMismatch`` before any step is read.
        """
        saved = saved_expectation(reader_states(state))
        expect = merge_expectations(self._expect, saved)
        self._close_path()
        # a stream read may continue a later pass (an unshuffled epochs position, consumer/_passes.py)
        self._start, order = start_of(state, self._order if self.options.epochs_read else None)
        if order is not None or not self.options.epochs_read:
            self._order = order
        self._restore = ReaderState.from_json(state)  # its cursor is the one just found (the epochs position)
        self._restored = True
        self._expect = expect
        if saved:
            self._check_contract()

    def restart(self) -> None:
        """Start the next iteration where a new reader would: step 0 (an epochs read: its first epoch)."""
        self._close_path()
        self._order = self._initial_order()
        self._start = None if self._order else Cursor(0)
        self._restore = None
        self._restored = False

    def _initial_order(self) -> EpochOrder | None:
        """The epochs order of the options (None: a stream read)."""
        o = self.options
        return EpochOrder(o.shuffle, o.block_size, o.seed, o.epochs) if o.epochs_read else None

    def set_epoch(self, epoch: int) -> None:
        """Start (the next iteration) at the beginning of ``epoch``; reads ``epochs`` epochs from there.

        A stream read (``shuffle=False, epochs=1``) has one pass and no epochs:
        there it changes nothing (training frameworks call it at every epoch start),
        with a warning for ``epoch > 0``. Called by accelerate's re-sharding wrappers
        (a torch DataLoader over this dataset through ``accelerator.prepare``), it raises
        :class:`~torch_tgb.errors.FrameworkError` (``consumer/_accelerate.py``).
        """
        refuse_accelerate_wrapping(str(self.ns))
        if self._order is None or not self.options.epochs_read:
            if epoch != 0 and self._order is None:
                warnings.warn(
                    f"set_epoch({epoch}) on a stream read changes nothing: the next iteration continues where "
                    "the last one stopped, and over a sealed namespace an iteration begun at its end reads the "
                    "next pass (HF Trainer, accelerate and other frameworks call set_epoch at every epoch "
                    "start). For shuffled epochs of a sealed namespace pass shuffle=True and epochs= to the reader",
                    stacklevel=2,
                )
            return
        self._close_path()
        self._order = self._order.starting_at(epoch)
        self._start = self._restore = None

    @property
    def path(self) -> ReadPath | None:
        """The read path of the iteration in progress (``StepPath`` or ``RunPath``; None between iterations)."""
        return self._path

    @property
    def step(self) -> int:
        """The next step this dataset delivers, in TGB steps (what a checkpoint of it resumes at)."""
        return self._state().at.cursor.step

    def stats(self) -> ConsumerStats:
        """Read statistics of every iteration so far (``skipped_steps``: steps this rank skipped by agreement)."""
        stats = self._closed_stats if self._path is None else merge_stats([self._closed_stats, self._path.stats()])
        skipped = len(self._skip_count.steps)
        return dataclasses.replace(stats, skipped_steps=skipped) if skipped else stats

    # --- the namespace -----------------------------------------------------------

    def __len__(self) -> int:
        """Steps of one pass for this rank, once the namespace is sealed (``consumer/_passes.py``).

        Under this rank's read plan (``dp_split`` and the written layout), up to the seal
        or ``stop_step``; an epochs read counts one epoch. A namespace that is not sealed
        has no length: ``TypeError``, as for any unsized iterable, so frameworks treat the
        reader as a stream.
        """
        num_steps = self._sealed_steps()
        if num_steps is None:
            raise TypeError(
                f"{self.ns}: a TGB stream has no len() before its namespace is sealed (steps may still be "
                "committed); frameworks read it as an unsized stream"
            )
        stop = None if self._order is not None else self.options.stop_step
        return scheduled_length(self, num_steps, stop)  # pass_length, or a batch_schedule's whole steps (#46)

    def _sealed_steps(self) -> int | None:
        """The namespace's steps once it is sealed (read from the head until then, then kept); None before."""
        if self._num_steps is None:
            self._num_steps = self._with_store(sealed_namespace)[0]
        return self._num_steps

    def _steps_per_epoch(self) -> int:
        """``N`` of an epochs read (the sealed namespace's steps), read once and carried to workers."""
        if self._num_steps is None:
            self._num_steps = self._with_store(sealed_steps)
        return self._num_steps

    def _next_pass(self) -> None:
        """Before an iteration of a stream read: if no step of this pass is left, go on with the next pass.

        See ``consumer/_passes.py``. The decision depends only on where the loader as a
        whole stands (the shared start of its workers), so every worker takes the same one.
        Each later pass is one unshuffled epoch (an iteration reads at most one pass).
        """
        if self.options.epochs_read or self._path is not None:
            return
        setting = self._setting()
        exact = self._restore if self._restore is not None and self._restore.setting == setting else None
        if exact is not None and setting.num_workers > 1:
            return  # an exact worker position: the loader's own start is not known here
        cursor = exact.at.cursor if exact is not None else self._start_cursor()
        if cursor.step == 0:
            return
        stop = self.options.stop_step
        if stop is not None:  # a bounded stream: one pass, whether the namespace is sealed or not
            if self._order is None and cursor.step >= stop:
                warnings.warn(f"{self.ns}: the stream read ended at stop_step={stop}: this iteration is empty",
                              stacklevel=3)
            return
        num_steps = self._sealed_steps()
        if num_steps is None:
            return  # a stream that may still grow
        done = 0 if self._order is None else self._order.first_epoch  # passes before this one
        plan = self._plan()
        try:
            left = steps_left(cursor, (done + 1) * num_steps, tgbs_per_step=plan.tgbs_per_step,
                              steps_per_tgb=plan.steps_per_tgb)
        except LayoutError:
            return  # a position this plan cannot continue from: the read path says so
        if left > 0:
            return
        if self._order is None:  # the first pass is over: from here every step may be read again
            reclaimed = self._with_store(sealed_namespace)[1]
            if reclaimed > 0:
                warnings.warn(
                    f"{self.ns}: the stream ended at its seal (step {num_steps}) and steps below {reclaimed} were "
                    "reclaimed, so no further pass can be read: this iteration is empty",
                    stacklevel=3,
                )
                return
        o = self.options
        self._order = EpochOrder(False, o.block_size, o.seed, 1, first_epoch=done + 1)
        self._start = self._restore = None

    def _start_cursor(self) -> Cursor:
        if self._start is not None:
            return self._start
        assert self._order is not None  # only an epochs read starts at "the first epoch"
        return Cursor(self._order.first_epoch * self._steps_per_epoch())

    def _plan(self) -> ReadPlan:
        """How this mesh reads the written layout (read once from ``dataset.json``, carried to workers)."""
        if self._written is None:
            self._with_store(lambda store: None)
        assert self._written is not None  # set by _open
        layout, schema = self._written.layout, self._written.schema
        return plan_reads(layout, self.mesh, dp_split=self.options.dp_split, ragged=ragged_keys(schema))

    def _keys(self) -> KeyPlan:
        """What this reader reads, derives and delivers (``ReaderOptions.keys``/``derive``)."""
        plan = self._plan()
        assert self._written is not None  # read by _plan
        return plan_keys(self._written.schema, plan.written.labels_from, self.options.keys, self.options.derive)

    def _check_contract(self) -> None:
        """``SchemaMismatch`` unless the namespace's metadata holds what ``expect`` says (``consumer/_contract.py``)."""
        if self._expect:
            self._plan()  # reads dataset.json once
            assert self._written is not None  # set by _plan
            check_contract(self._expect, self._written.metadata, namespace=str(self.ns))

    def _with_store(self, read: Callable[[ObjectStore], _T]) -> _T:
        """``read`` of this reader's store (node share and hot tier as the read path has them), closed after."""
        store, _, _ = self._open()
        try:
            return read(store)
        finally:
            if not isinstance(self.ns, ObjectStore):  # a store handed in belongs to the caller
                store.close()

    def _open(self) -> tuple[ObjectStore, Manifest, KnownNamespace | None]:
        """The store and manifest of ``ns``, and what earlier readers in this process learnt of it (None: nothing)."""
        store, manifest, known, self._written = open_namespace(self.ns, self.storage_options, self.options,
                                                               self._written)
        self._read.identity = self._written.identity  # which namespace this is, for the state (consumer/_identity.py)
        return store, manifest, known

    # --- iteration ---------------------------------------------------------------

    def _close_path(self) -> None:
        """End the iteration in progress, keeping its position as the exact state to continue from."""
        path = self._path
        if path is not None:
            self._restore = self._state()
            self._closed_stats = self.stats()
            self._path = None
            path.close()

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """This rank's steps from where the last iteration (or load) stopped; see the module docstring.

        Refused with :class:`~torch_tgb.errors.FrameworkError` when accelerate re-shards it
        (``consumer/_accelerate.py``), and when a tgb.DataLoader owns it, has just loaded a
        state, and something else iterates it first: accelerate's ``skip_first_batches``
        (a plain DataLoader that drops the first n steps) would skip the restored ones again.
        """
        by_loader = self._by_loader
        if self._owned and not by_loader and self._restored:
            raise FrameworkError(
                f"{self.ns}: this TGBDataset's tgb.DataLoader has just loaded a state (it continues at step "
                f"{self.step}), and another loader is reading the dataset before it: accelerate's "
                "skip_first_batches (its checkpoint guide's resume) would skip that many steps again. After "
                "accelerator.load_state (or load_state_dict) iterate the tgb.DataLoader itself; it already "
                "starts at the first step not trained"
            )
        refuse_accelerate_wrapping(str(self.ns))
        return self._iterate(by_loader)

    def _iterate(self, by_loader: bool) -> Iterator[dict[str, torch.Tensor]]:
        if by_loader:
            self._restored = False
        self._close_path()  # an earlier iterator still open: continue from its position
        self._check_contract()  # before step 0
        self._next_pass()
        store, manifest, known = self._open()
        self._read.view = pin_view(manifest, self._read.pin, options=self.options, known=known)
        setting = self._setting()
        plan = self._plan()
        exact = None if self._restore is None else self._restore.restores(
            setting, {"tgbs_per_step": plan.tgbs_per_step, "steps_per_tgb": plan.steps_per_tgb})
        start = PathStart(self._start_cursor() if exact is None else exact.origin, exact, setting.worker,
                          setting.num_workers)
        path, num_steps = open_path(store, manifest, plan, self._keys(), self.options, self._order, start,
                                    emit_meta=self.emit_meta and by_loader, known=known,
                                    stall=None if self._owned else self.options.stall)  # a loader warns itself
        if num_steps is not None:
            self._num_steps = num_steps
        self._path = path
        try:
            if self.options.on_corrupt == "skip_step" and get_worker_info() is None:
                yield from gate(iter(path), self._skip_count, StepAgreement(namespace=str(self.ns)))
            else:  # no skipping, or a worker: the main process's tgb.DataLoader gates (it holds the group)
                yield from scheduled_steps(self, path, start=start.origin.step if start.exact is None else
                                           start.exact.cursor.step, manifest=manifest, by_loader=by_loader)
        finally:
            if self._path is path:
                self._close_path()  # the final position stays readable after the loop ends
            path.close()
            if not isinstance(self.ns, ObjectStore):  # a store handed in belongs to the caller
                store.close()

