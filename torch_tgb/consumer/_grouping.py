"""Training steps of a batch schedule: consecutive reader steps joined into the size the schedule says.

A reader's own steps ("base steps") are fixed by the written layout and the
mesh: each spans ``k = ReadPlan.tgbs_per_step`` TGBs (``dp_size / written dp``
when more ranks read than the TGBs were cut for, else 1), and this rank's rows
of it. :class:`ScheduledSteps` joins ``B(t) / (k·G)`` consecutive base steps
into training step ``t`` (``consumer/_schedule.py``): along dim 0, a ragged
key's values and offsets as ``layout.join_ragged`` joins slices. Every group
ends on a TGB boundary, so the reader's position after a training step (what
``state_dict`` and checkpoints hold) is ``S(t + 1)``: exact for a restart at
any world size.

Where it runs: in the process that hands steps to the trainer -- the
TGBDataset's own iteration without workers, the tgb.DataLoader's main process
with workers (the workers read base steps round robin; joining happens after
the in-order handover, so a group never depends on which worker read what).
``G``, the rows of a TGB, is read from the manifest entry of the first TGB once
the first base step is in hand, and every training step's rows are checked
against ``B(t) / dp_size``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import torch
from torch.utils.data import get_worker_info

from torch_tgb.consumer._passes import pass_length
from torch_tgb.consumer._schedule import BatchSchedule, ScheduleStep
from torch_tgb.errors import FrameworkError, LayoutError
from torch_tgb.layout import join_ragged, offsets_key
from torch_tgb.manifest import Manifest

if TYPE_CHECKING:
    from torch_tgb.consumer.dataset import TGBDataset

__all__ = ["ScheduleStep", "ScheduledSteps", "join", "scheduled_length", "scheduled_steps", "tgb_rows"]

log = logging.getLogger(__name__)

Batch = dict[str, torch.Tensor]


class ScheduledSteps:
    """Iterates training steps of ``schedule`` over ``base`` steps starting at TGB step ``start``.

    ``rows_of(step)`` gives the rows of the TGB at ``step`` (a manifest
    read); ``tgbs_per_base`` and ``dp_size`` are the reader's plan and mesh;
    ``ragged`` its ragged keys. :attr:`current` is the last step handed out.
    """

    def __init__(
        self, base: Iterator[Batch], schedule: BatchSchedule, *, start: int, rows_of: Callable[[int], int],
        tgbs_per_base: int, dp_size: int, ragged: tuple[str, ...], namespace: str,
        on_step: Callable[[ScheduleStep], None] | None = None,
    ) -> None:
        self.base = base
        self.schedule = schedule
        self.start = start
        self.rows_of = rows_of
        self.tgbs_per_base = tgbs_per_base
        self.dp_size = dp_size
        self.ragged = ragged
        self.namespace = namespace
        self._skip = frozenset(ragged) | {offsets_key(k) for k in ragged}
        self.current: ScheduleStep | None = None
        self.on_step = on_step

    def __iter__(self) -> Iterator[Batch]:
        try:
            first = next(self.base)
        except StopIteration:
            return
        rows = self.rows_of(self.start)
        step = self.schedule.step_at(self.start, rows)
        pending: list[Batch] = [first]
        while True:
            at = self.schedule.at(step, rows)
            n = self._bases(at, rows)
            while len(pending) < n:
                try:
                    pending.append(next(self.base))
                except StopIteration:
                    if pending:
                        log.warning("%s: the stream ended inside training step %d (%d of its %d reader steps "
                                    "read): a partial step is not delivered", self.namespace, step, len(pending), n)
                    return
            batch = pending[0] if n == 1 else join(pending, self.ragged)
            self._check_rows(batch, at)
            self.current = at
            if self.on_step is not None:
                self.on_step(at)
            pending = []
            yield batch
            step += 1

    def _bases(self, at: ScheduleStep, rows: int) -> int:
        """Reader steps training step ``at`` joins; a :class:`LayoutError` when the sizes do not divide."""
        tgbs = at.stop - at.first
        if tgbs % self.tgbs_per_base:
            raise LayoutError(
                f"{self.namespace}: batch_schedule: training step {at.step} takes {at.batch_size} rows "
                f"({tgbs} TGBs of {rows}), but each step of this reader spans {self.tgbs_per_base} TGBs "
                f"({self.tgbs_per_base * rows} rows at dp_size={self.dp_size}): every batch size must be a "
                "multiple of that (more ranks than the TGBs were cut for read whole slices)"
            )
        return tgbs // self.tgbs_per_base

    def _check_rows(self, batch: Batch, at: ScheduleStep) -> None:
        """Each rank holds ``B(t) / dp_size`` rows: a TGB of another size would shift every later step."""
        want = at.batch_size // self.dp_size
        for name, tensor in batch.items():
            if name in self._skip or tensor.dim() == 0:
                continue
            if int(tensor.shape[0]) != want:
                raise LayoutError(
                    f"{self.namespace}: batch_schedule: training step {at.step} (TGB steps [{at.first}, {at.stop})) "
                    f"has {int(tensor.shape[0])} rows of {name!r} on this rank, not {want} = {at.batch_size} / "
                    f"{self.dp_size}: the namespace's TGBs do not all hold {at.batch_size // (at.stop - at.first)} "
                    "rows, which a schedule needs"
                )
            return


def join(parts: list[Batch], ragged: tuple[str, ...]) -> Batch:
    """Consecutive steps of one rank as one: dense keys concatenated on dim 0, ragged keys joined with offsets."""
    out: Batch = {}
    skip = {offsets_key(k) for k in ragged}
    for name in parts[0]:
        if name in skip:
            continue
        if name in ragged:
            out[name], out[offsets_key(name)] = join_ragged(parts, name)
        else:
            out[name] = torch.cat([p[name] for p in parts], dim=0)
    return out


def tgb_rows(manifest: Manifest, step: int, *, namespace: str) -> int:
    """The rows of a TGB (its entry's ``samples``), which a schedule needs alike in every TGB.

    The TGB at ``step``; a position past the namespace's steps (a later pass of a
    sealed stream counts on) reads the newest committed TGB instead.
    """
    entries = manifest.entries(step, step + 1)
    if not entries:
        newest = manifest.head().num_steps
        entries = manifest.entries(newest - 1, newest) if newest else []
    if not entries or entries[0].samples < 1:
        raise LayoutError(f"{namespace}: batch_schedule needs the rows of TGB step {step}, which its manifest entry "
                          "does not record (a namespace written before entries counted samples)")
    return entries[0].samples


def _rows_from_namespace(dataset: TGBDataset, step: int) -> int:
    """Rows of step ``step``'s TGB, read through the reader's own store (node share, hot tier; one handed in
    stays open)."""
    return dataset._with_store(lambda store: tgb_rows(Manifest(store), step, namespace=str(dataset.ns)))


def scheduled_steps(
    dataset: TGBDataset, base: Iterable[Batch], *, start: int, manifest: Manifest | None, by_loader: bool,
) -> Iterable[Batch]:
    """The steps ``dataset`` hands to the trainer: ``base`` as it is, or joined into ``batch_schedule``'s steps.

    Joined in the process that hands steps to the trainer: here unless this is a
    tgb.DataLoader worker (its loader joins them in the main process, after the handover);
    a worker of another loader is refused, since nobody would join its steps.
    ``dataset.batch_step`` follows the steps handed out.
    """
    schedule = dataset.options.batch_schedule
    if schedule is None:
        return base
    if get_worker_info() is not None:
        if not by_loader:
            raise FrameworkError(f"{dataset.ns}: a TGBDataset with batch_schedule in the workers of another loader: "
                                 "its steps would reach the trainer unjoined; read it with tgb.DataLoader")
        return base
    plan = dataset._plan()
    namespace = str(dataset.ns)

    def rows_of(step: int) -> int:
        if manifest is not None:
            return tgb_rows(manifest, step, namespace=namespace)
        return _rows_from_namespace(dataset, step)

    def on_step(at: ScheduleStep) -> None:
        dataset.batch_step = at

    assert isinstance(schedule, BatchSchedule)  # ReaderOptions parsed it
    return ScheduledSteps(iter(base), schedule, start=start, rows_of=rows_of, tgbs_per_base=plan.tgbs_per_step,
                          dp_size=dataset.mesh.dp_size, ragged=plan.ragged, namespace=namespace, on_step=on_step)


def scheduled_length(dataset: TGBDataset, num_steps: int, stop: int | None) -> int:
    """``len()`` of one pass: reader steps, or with ``batch_schedule`` the whole training steps in it."""
    plan = dataset._plan()
    schedule = dataset.options.batch_schedule
    if schedule is None:
        return pass_length(num_steps, tgbs_per_step=plan.tgbs_per_step, steps_per_tgb=plan.steps_per_tgb,
                           stop_step=stop)
    assert isinstance(schedule, BatchSchedule)
    end = num_steps if stop is None else min(stop, num_steps)
    return schedule.steps_within(end, _rows_from_namespace(dataset, max(end - 1, 0))) if end > 0 else 0
