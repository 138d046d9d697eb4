"""tgb.DataLoader: a torchdata StatefulDataLoader over a TGBDataset.

Every item is one step (``batch_size=None``). With ``num_workers = W > 0``
worker ``w`` reads steps ``w, w+W, ...`` and the loader's in-order round
robin hands them out in step order, so the sequence is the same as with no
workers.

``state_dict()`` is the StatefulDataLoader's own state; each worker's
dataset state in it carries a ``"tgb_cursor"``, and the smallest one is the
first step not yet delivered. ``load_state_dict`` always continues from that
canonical cursor (``cursor_of``), with a fresh round robin: exact for a state
of this loader, and equally for one taken with another worker count, mesh
or dp_split, or from a bare TGBDataset.

With workers, each step of tensors crosses to the main process as one
shared-memory buffer (:mod:`torch_tgb.consumer._shared_step`), not a
segment per tensor, and is handed out as views of it.

``device="cuda"`` delivers each step on the GPU, copied one step ahead on a
side stream (see :mod:`torch_tgb.consumer.device`); ``state_dict()`` then
still names the first step not yet handed to the trainer, not the one in
flight. ``device=None`` or ``"cpu"`` delivers host tensors as before.

A training framework that fetches ahead of the batch it trains (Lightning's
fit loop) calls :meth:`DataLoader.track_consumed` and
:meth:`DataLoader.consumed`; ``state_dict()`` then describes the batches the
loop consumed (``consumer/_consumed.py``). HF accelerate's ``prepare`` keeps
the loader as it is (``consumer/_accelerate.py``). docs/frameworks.md has both.

``iter(loader)`` reads nothing (and starts no worker) before the first
``next()``, so a framework that creates its iterator before it restores a
position can still restore it (:meth:`DataLoader.resume`). The loader's
dataset knows when its own loader reads it: another loader built over it
(accelerate's ``skip_first_batches``) gets plain steps from its workers, not
shared-memory ones, and is refused right after a restore (it would skip the
restored steps again). ``len(loader)``: one pass of a sealed namespace.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Iterator, Mapping
from multiprocessing.context import BaseContext
from typing import Any

import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import default_convert
from torchdata.stateful_dataloader import StatefulDataLoader
from typing_extensions import Unpack

from torch_tgb.consumer._in_process import InProcessIter, has_in_process_iter
from torch_tgb.cursor import Cursor
from torch_tgb.consumer._identity import loader_view
from torch_tgb.consumer._accelerate import AccelerateAware
from torch_tgb.consumer._consumed import Consumption
from torch_tgb.consumer._grouping import ScheduleStep, scheduled_steps
from torch_tgb.consumer._finish import uncast_keys
from torch_tgb.consumer._paths import META_KEY
from torch_tgb.consumer._state import canonical_state, next_step_of
from torch_tgb.consumer.dataset import STATS_KEY, TGBDataset
from torch_tgb.consumer.options import ReaderOptions, ReadSettings
from torch_tgb.consumer._shared_step import SharedStep, pack_step
from torch_tgb.consumer._step_ring import ring_slots, send_step
from torch_tgb.consumer._worker_state import without_worker_stats, worker_readers
from torch_tgb.consumer.device import DeviceFeed
from torch_tgb.datapipes.read.stall import StallClock
from torch_tgb.datapipes.read.stats import ConsumerStats, merge_stats
from torch_tgb.consumer._skips import gate
from torch_tgb.distributed.agreement import StepAgreement
from torch_tgb.distributed.consistency import ConsistencyChecker
from torch_tgb.errors import FrameworkError
from torch_tgb.layout import Mesh
from torch_tgb.storage import ObjectStore

__all__ = ["DataLoader"]


class DataLoader(StatefulDataLoader, AccelerateAware):
    """Batches of this rank's slice, one per step, with exact resume.

    Reader settings as on :class:`TGBDataset` (``options=ReaderOptions(...)``
    or its fields as keywords: ``timeout=None`` waits without limit, with
    periodic warnings; ``expect={...}``: the data contract, checked before step 0).
    ``num_workers`` worker processes read steps round robin (the order stays the
    step order); ``pin_memory`` pins on machines with CUDA. :attr:`step` is the next
    step to deliver; ``len()`` is one pass of a sealed namespace.
    """

    def __init__(
        self,
        ns: str | ObjectStore | TGBDataset,
        mesh: Mesh | None = None,
        *,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        multiprocessing_context: str | BaseContext | None = None,
        device: str | torch.device | None = None,
        storage_options: Mapping[str, Any] | None = None,
        options: ReaderOptions | None = None,
        **settings: Unpack[ReadSettings],
    ) -> None:
        """``ns``, ``mesh``, ``storage_options``, ``options`` and the :class:`ReaderOptions` keywords are those
        of :class:`TGBDataset` (``ns`` may also be a ``TGBDataset``); ``device``: see :mod:`torch_tgb.consumer.device`."""
        if isinstance(ns, TGBDataset):
            if options is not None or settings or storage_options or mesh is not None:
                raise TypeError("tgb.DataLoader over a TGBDataset takes its reader settings from the dataset; "
                                "pass mesh/options/reader keywords to the TGBDataset instead")
            dataset = ns
        else:
            dataset = TGBDataset(ns, mesh, storage_options=storage_options, options=options, **settings)
        feed = None
        if device is not None and torch.device(device).type != "cpu":
            # a dataset built here casts on the device, not the host; one handed in keeps its own setting
            feed = DeviceFeed(device, dtype=None if isinstance(ns, TGBDataset) else dataset.options.dtype)
            if not isinstance(ns, TGBDataset):
                dataset.options = dataclasses.replace(dataset.options, dtype=None)
        dataset.emit_meta = dataset.options.check_consistency and num_workers > 0
        dataset._owned = True  # another loader iterating it right after a load is refused (TGBDataset.__iter__)
        with warnings.catch_warnings():
            # torchdata 0.11 calls the deprecated torch.set_vital in its constructor: a
            # UserWarning on every rank that says nothing about this loader.
            warnings.filterwarnings("ignore", message=".*set_vital.*deprecated", category=UserWarning)
            super().__init__(
                dataset,
                batch_size=None,
                num_workers=num_workers,
                # Pinning needs an accelerator; on a CPU-only machine it is a no-op, not an error.
                pin_memory=pin_memory and torch.cuda.is_available(),
                prefetch_factor=prefetch_factor,
                multiprocessing_context=multiprocessing_context,
                collate_fn=_collate,
                in_order=True,
                snapshot_every_n_steps=1,
            )
        # the training thread's wait in next() per step (it warns past ReaderOptions.stall's share of the step)
        self._stall = StallClock(dataset.options.stall, what=str(getattr(dataset, "ns", "")))
        self._feed = feed
        self._held: dict[str, Any] | None = None  # the state before the batch in flight (device)
        self._consumption = Consumption()  # what the training loop consumed, for frameworks that fetch ahead
        self._checker = ConsistencyChecker(namespace=str(getattr(dataset, "ns", ""))) if dataset.emit_meta else None

    @property
    def tgb_dataset(self) -> TGBDataset:
        return self.dataset  # type: ignore[return-value]

    @property
    def batch_step(self) -> ScheduleStep | None:
        """With ``batch_schedule``: the training step last handed out, its batch size and TGB steps (else None)."""
        return self.tgb_dataset.batch_step

    @property
    def step(self) -> int:
        """The next step this loader delivers, in TGB steps (what a checkpoint of it resumes at)."""
        if self.num_workers == 0 or self._iterator is None:
            return self.tgb_dataset.step
        return next_step_of(self.state_dict())

    def __len__(self) -> int:
        """Steps of one pass for this rank once the namespace is sealed; ``TypeError`` before (see ``TGBDataset``).

        Not the base loader's ``len()``: that one also makes its iterators warn when an
        iteration goes on past the length, which an epochs read does by design.
        """
        return len(self.tgb_dataset)

    def _get_iterator(self) -> Any:
        # Every iterator of this loader is made here (by iter() and by state_dict()): the dataset
        # (and the copy each worker gets now) knows it is read by its own loader, which hands
        # shared-memory steps to the main process; another loader over it gets plain steps.
        dataset = self.tgb_dataset
        dataset._by_loader = True
        try:
            if self.num_workers > 0:
                dataset._ring_slots = ring_slots(num_workers=self.num_workers, prefetch_factor=self.prefetch_factor)
                return super()._get_iterator()
            if not has_in_process_iter():  # a torchdata without the iterator InProcessIter shortens: its own
                return super()._get_iterator()
            # load_state_dict hands the dataset its state and the base loader {}: no iterator state to resume
            return InProcessIter(self, None)
        finally:
            dataset._by_loader = False

    def _before_workers(self) -> None:
        # Workers report their position only with their next item: read the written layout
        # once here, so every worker's initial state already names its own first step
        # (and the workers do not each wait for dataset.json).
        if self.num_workers > 0:
            self.tgb_dataset._plan()

    def __iter__(self) -> Iterator[Any]:
        """The next batches; nothing is read (and no worker starts) before the first ``next()``.

        So a state loaded between ``iter()`` and the first batch still applies, as it
        does when frameworks create their iterator before they restore a position
        (Lightning's fit loop does, see ``integrations/lightning.py``).
        """
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        self._before_workers()
        if self._feed is not None and self._feed.dtype is not None:  # the device cast keeps what the host cast keeps
            self._feed.keep = uncast_keys(self.tgb_dataset._plan())
        self._continue_workers()
        if self.num_workers > 0:
            self.tgb_dataset._check_contract()  # here, not in each worker
            self.tgb_dataset._next_pass()  # decided once here, for every worker (consumer/_passes.py)
            self.tgb_dataset._read.pin = loader_view(self.tgb_dataset)  # one view for every worker (_identity.py)
        self.tgb_dataset._restored = False  # this loader reads it now: no longer "just restored"
        scheduled = self.num_workers > 0 and self.tgb_dataset.options.batch_schedule is not None
        start = self.tgb_dataset.step if scheduled else 0  # batch_schedule (#46): the workers' first TGB step
        inner = super().__iter__()
        delivered = self._deliver(inner)
        if scheduled:  # batch_schedule (#46): the workers' steps joined here, after the in-order handover
            delivered = iter(scheduled_steps(self.tgb_dataset, delivered, start=start, manifest=None, by_loader=True))
        if self.num_workers > 0 and self.tgb_dataset.options.on_corrupt == "skip_step":  # the ranks agree here
            dataset = self.tgb_dataset
            delivered = gate(delivered, dataset._skip_count, StepAgreement(namespace=str(dataset.ns)))
        batches = delivered if self._feed is None else self._ahead(delivered, self._feed)
        stall, clock = self._stall, time.perf_counter
        started = clock()
        for batch in self._consumption.hand_out(batches, self._handed_out_state):
            stall.waited(started, clock())
            yield batch
            started = clock()  # the training loop asks for the next batch
        stall.waited(started, clock(), steps=0)

    def _continue_workers(self) -> None:
        """With workers, a new iteration starts where the last one stopped, as it does in-process.

        New workers get the main process's copy of the dataset, which still holds the
        position it had before the last iteration (or load); frameworks iterate once per
        epoch (Lightning, HF Trainer), and the next epoch must continue the stream, not
        replay it. A fresh iterator that ``state_dict()`` made is the next one: nothing to do.
        """
        if self.num_workers > 0 and self._iterator is not None and not self._initial_iter_for_state_dict:
            self.tgb_dataset.load_state_dict(self._handed_out_state())

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch handed out, or (see :meth:`track_consumed`) the last one consumed.

        Workers' read statistics ride in their snapshots only: they are left out here.
        """
        self._before_workers()
        state = self._consumption.state() if self._consumption.held() else self._handed_out_state()
        # held: a framework holds batches it fetched ahead, not consumed yet; accelerate: see _accelerate.py
        return canonical_state(state) if self._seen_by_accelerate else state

    def _handed_out_state(self) -> dict[str, Any]:
        if self._held is not None:  # one batch is in flight to the device: not delivered yet
            return self._held
        return without_worker_stats(super().state_dict())

    def track_consumed(self) -> None:
        """For training loops that fetch batches ahead of the one they train (Lightning's fit loop, by one).

        From now on :meth:`state_dict` describes the batches the loop acknowledged
        with :meth:`consumed`, not those handed out (see ``consumer/_consumed.py``).
        Call it before the loop fetches its second batch; the Lightning callback
        (``torch_tgb.integrations.lightning``) does both calls with Lightning's defaults.
        """
        self._consumption.track()

    def consumed(self, n: int = 1) -> None:
        """The training loop has finished ``n`` more batches (only counts after :meth:`track_consumed`)."""
        self._consumption.consumed(n)

    def _ahead(self, batches: Iterator[Any], feed: DeviceFeed) -> Iterator[Any]:
        """Device delivery one step ahead; ``_held`` keeps the state of what was handed out."""
        pending: tuple[Any, dict[str, Any]] | None = None
        try:
            for batch in batches:
                issued = (feed.issue(batch), without_worker_stats(StatefulDataLoader.state_dict(self)))
                if pending is not None:
                    self._held = pending[1]
                    yield feed.ready(pending[0])
                pending = issued
            if pending is not None:
                self._held = pending[1]
                yield feed.ready(pending[0])
        finally:
            self._held = None

    def _deliver(self, inner: Iterator[Any]) -> Iterator[Any]:
        while True:
            try:
                batch = next(inner)
            except StopIteration:
                if self._checker is not None:
                    self._checker.check_end()
                return
            if type(batch) is SharedStep:
                batch = batch.unpack()
            meta = batch.pop(META_KEY, None) if isinstance(batch, dict) else None
            if self._checker is not None and meta is not None:
                step, sub, subs, digest = (int(x) for x in meta.tolist())
                self._checker.check_digest(Cursor(step, 0, sub, subs), digest)
            yield batch

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from the canonical position of ``state_dict`` (any consumer state), with a fresh round robin."""
        self._consumption.reset()
        if not state_dict:
            super().load_state_dict({})
            return
        # The dataset finds the reader states by path and continues from the smallest position
        # among them (the cursor, or the epochs position): the first step not yet delivered.
        self.tgb_dataset.load_state_dict(state_dict)
        super().load_state_dict({})

    def resume(self, state: Mapping[str, Any]) -> None:
        """Load ``state`` for a framework that restores positions late (after ``iter()``, before reading).

        Nothing is read before the first ``next()``, so a state loaded up to then
        applies to the iteration already created. If that iteration has handed out a
        batch, it is too late: when the iteration began at ``state``'s position nothing
        needs doing, otherwise :class:`~torch_tgb.errors.FrameworkError` (the framework
        holds a batch from the wrong position). The Lightning callback calls this with the
        loader states of a checkpoint Lightning itself does not restore.
        """
        if self._consumption.handed == 0:
            self.load_state_dict(state)
            return
        began = self._consumption.began
        if began is not None and next_step_of(began) == next_step_of(state):
            return
        at = "?" if began is None else next_step_of(began)
        raise FrameworkError(
            f"{self.tgb_dataset.ns}: a framework restores this loader to step {next_step_of(state)} after it "
            f"has handed out batches from step {at}: it would train from the wrong step. The framework must "
            "restore a TGB loader's state before it fetches from it (docs/frameworks.md)"
        )

    def restart(self) -> None:
        """Start the next iteration where a new loader would (step 0, or the first epoch): validation loaders.

        A validation loader must read the whole set at every validation; a framework
        adapter calls this after each validation run (integrations/lightning.py).
        """
        self._consumption.reset()
        self.tgb_dataset.restart()
        super().load_state_dict({})

    def set_epoch(self, epoch: int) -> None:
        """Start the next iteration at the beginning of ``epoch`` (epochs reads; see ``TGBDataset.set_epoch``)."""
        self.tgb_dataset.set_epoch(epoch)

    def stats(self) -> ConsumerStats:
        """Read statistics; with workers, summed over the workers' last reports."""
        if self.num_workers == 0:
            own = self.tgb_dataset.stats()
        elif self._iterator is None:
            own = ConsumerStats()
        else:
            readers = worker_readers(StatefulDataLoader.state_dict(self))
            own = merge_stats(ConsumerStats.from_json(r[STATS_KEY]) for r in readers if STATS_KEY in r)
        return ConsumerStats.from_json({**own.to_json(), **self._stall.figures()})


def _collate(batch: object) -> object:
    """The DataLoader's ``default_convert``, without its walk over a step that is already tensors.

    In a worker of a tgb.DataLoader such a step travels through a slot of the worker's
    ring of shared buffers (:mod:`torch_tgb.consumer._step_ring`), copied out as the main
    process receives it; ``_deliver`` unpacks it. Another loader built with this collate over the same dataset (accelerate's
    ``skip_first_batches``, which HF Trainer's resume uses, copies it) gets the step as
    it is: it has no ``_deliver`` to unpack it.
    """
    if type(batch) is dict and all(type(v) is torch.Tensor for v in batch.values()):
        info = get_worker_info()
        if info is None or not getattr(info.dataset, "_by_loader", False):
            return batch
        slots = getattr(info.dataset, "_ring_slots", 0)
        return send_step(batch, slots=slots) if slots else pack_step(batch)
    return default_convert(batch)
