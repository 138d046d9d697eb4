"""Project: which slices of which TGBs make up each of this rank's steps.

A rank's consumer steps map onto TGB steps through a ``layout.ReadPlan`` (built
by ``layout.plan_reads``): with ``tgbs_per_step = k`` one consumer step
spans k consecutive TGBs (more DP ranks than the TGBs were cut for); with
``steps_per_tgb = m`` one TGB is spread over m consumer steps (fewer DP ranks,
``dp_split="spread"``); otherwise steps correspond one to one. Counting starts
at ``origin`` (the cursor the reader started or resumed from), so a cursor
taken under another topology is a valid start whenever it falls on a boundary
of this plan.

Worker sharding happens here, before any footer or slice is fetched: worker
``w`` of ``W`` takes consumer steps ``origin + w, origin + w + W, ...``, and a
DataLoader's in-order round robin over the workers restores the sequence.

State: the origin, the index of the next consumer step this worker yields,
the newest version seen, and its source's (the poller's) state at that step,
derived with the source's ``state_at`` rather than copied so that entries
buffered ahead never leak into a checkpoint. ``position()`` gives the same as
one frozen :class:`Position`; a Project built with ``start=`` that position
continues exactly there, so no caller has to read or build node states.
"""

from __future__ import annotations

import logging
from typing import Any

from torchdata.nodes import BaseNode

from torch_tgb.cursor import Cursor
from torch_tgb.datapipes.read._types import Position, ReadTask, StepEntry, StepSource
from torch_tgb.errors import LayoutError
from torch_tgb.layout import ReadPlan, StepReads

__all__ = ["Project", "cursor_at", "first_index"]

logger = logging.getLogger(__name__)


def cursor_at(origin: Cursor, index: int, *, tgbs_per_step: int, steps_per_tgb: int, version: int = 0) -> Cursor:
    """Cursor (TGB units) of consumer step ``index`` counted from ``origin``.

    Raises LayoutError when ``origin`` is inside a TGB at a point this plan
    cannot start from.
    """
    if tgbs_per_step > 1 or steps_per_tgb == 1:
        if not origin.at_boundary():
            raise LayoutError(
                f"cannot resume at step={origin.step} sub_step={origin.sub_step}/{origin.sub_steps}: this "
                f"reader consumes whole TGBs ({tgbs_per_step} per step); resume from a step boundary or "
                "with the topology that took the cursor"
            )
        return Cursor(origin.step + index * tgbs_per_step, version)
    pos = origin.step * steps_per_tgb + origin.split(steps_per_tgb) + index
    return Cursor(pos // steps_per_tgb, version, pos % steps_per_tgb, steps_per_tgb)


def first_index(worker: int, num_workers: int) -> int:
    """The first consumer step index (from the origin) of ``worker``."""
    if not (0 <= worker < num_workers):
        raise ValueError(f"worker {worker} out of range for {num_workers} workers")
    return worker


class Project(BaseNode[ReadTask]):
    """Turns the TGB stream into this rank's per-step read tasks."""

    ORIGIN_KEY = "origin"
    INDEX_KEY = "index"
    PLAN_KEY = "plan"
    VERSION_KEY = "version"
    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[StepEntry],
        plan: ReadPlan,
        *,
        origin: Cursor = Cursor(0),
        worker: int = 0,
        num_workers: int = 1,
        start: Position | None = None,
    ) -> None:
        super().__init__()
        if plan.tgbs_per_step < 1 or plan.steps_per_tgb < 1 or (plan.tgbs_per_step > 1 and plan.steps_per_tgb > 1):
            raise LayoutError(f"invalid read plan: {plan.tgbs_per_step=} {plan.steps_per_tgb=}")
        self.source: BaseNode[StepEntry] = source
        if not isinstance(source, StepSource):
            raise TypeError(
                f"Project reads a step source (ManifestPoller, BlockShuffle: state_at, next_step, available), "
                f"got {type(source).__name__}"
            )
        self._steps: StepSource = source
        self.plan = plan
        self.worker = worker
        self.num_workers = num_workers
        self._first = first_index(worker, num_workers)
        if start is not None:
            if start.plan != self._ratios():
                raise LayoutError(f"a position taken with plan {start.plan} cannot start a Project with {self._ratios()}")
            self._check_index(start.index)
            origin = start.origin
        self.origin = origin  # where reset(None) starts
        self._start_index = self._first if start is None else start.index
        self._start_version = origin.version if start is None else start.cursor.version
        cursor_at(origin, 0, **self._ratios())  # fail at construction on an impossible origin
        self._origin = origin
        self._index = self._start_index
        self._version = self._start_version
        self._buffer: dict[int, StepEntry] = {}
        self._reads: dict[int, StepReads] = {}

    def _check_index(self, index: int) -> None:
        if index < 0 or (index - self._first) % self.num_workers:
            raise LayoutError(f"step index {index} does not belong to worker {self.worker} of {self.num_workers}")

    def _ratios(self) -> dict[str, int]:
        return {"tgbs_per_step": self.plan.tgbs_per_step, "steps_per_tgb": self.plan.steps_per_tgb}

    def cursor(self, index: int | None = None) -> Cursor:
        """Cursor of consumer step ``index`` (default: the next one this worker yields)."""
        return cursor_at(self._origin, self._index if index is None else index, version=self._version, **self._ratios())

    def position(self) -> Position:
        """Where this node stands: the next step it yields and how it counts (see :class:`Position`)."""
        return self.position_at(self._index, self._version)

    def position_after(self, task: ReadTask) -> Position:
        """Where a consumer stands once it has delivered ``task`` (a task of this node).

        Stages downstream buffer and prefetch, so the node itself may be ahead
        of what was delivered; this is the position a checkpoint must hold.
        """
        return self.position_at(task.index + self.num_workers, task.cursor.version)

    def position_at(self, index: int, version: int) -> Position:
        """The position before consumer step ``index`` (counted from the origin), at manifest ``version``."""
        plan = self._ratios()
        cursor = cursor_at(self._origin, index, version=version, **plan)
        return Position(cursor, self._origin, index, plan["tgbs_per_step"], plan["steps_per_tgb"])

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            plan = initial_state.get(self.PLAN_KEY)
            if plan is not None and plan != self._ratios():
                raise LayoutError(f"Project state was taken with plan {plan}, this one is {self._ratios()}")
            self._origin = Cursor.from_json(initial_state[self.ORIGIN_KEY])
            self._index = int(initial_state[self.INDEX_KEY])
            self._check_index(self._index)
            self._version = int(initial_state[self.VERSION_KEY])
        else:
            self._origin = self.origin
            self._index = self._start_index
            self._version = self._start_version
        self._buffer.clear()
        start = self.cursor()
        self.source.reset(self._steps.state_at(start.step, self._version))

    def get_state(self) -> dict[str, Any]:
        nxt = self.cursor()
        return {
            self.ORIGIN_KEY: self._origin.to_json(),
            self.INDEX_KEY: self._index,
            self.PLAN_KEY: self._ratios(),
            self.VERSION_KEY: self._version,
            self.SOURCE_KEY: self._steps.state_at(nxt.step, self._version),
        }

    def available(self, limit: int = 64) -> int:
        """Tasks (up to ``limit``) this node can produce from steps already committed."""
        bound = self._steps.next_step + self._steps.available()
        k, m = self.plan.tgbs_per_step, self.plan.steps_per_tgb
        base = self._origin.step * m + self._origin.split(m)
        count, index = 0, self._index
        while count < limit:
            first = self._origin.step + index * k if m == 1 else (base + index) // m
            if not all(s in self._buffer or s < bound for s in range(first, first + k)):
                break
            count += 1
            index += self.num_workers
        return count

    def next(self) -> ReadTask:
        cursor = self.cursor()
        k = self.plan.tgbs_per_step
        wanted = range(cursor.step, cursor.step + k)
        for step in [s for s in self._buffer if s < cursor.step]:
            del self._buffer[step]
        while any(s not in self._buffer for s in wanted):
            try:
                item = next(self.source)
            except StopIteration:
                if self._buffer:
                    logger.warning(
                        "stream ended inside consumer step at %s (%d of %d TGBs present): a partial "
                        "step is not delivered", cursor, len(self._buffer), k,
                    )
                raise
            self._version = max(self._version, item.version)
            if item.step >= cursor.step:
                self._buffer[item.step] = item
        entries = tuple(self._buffer[s] for s in wanted)
        sub = cursor.sub_step if self.plan.steps_per_tgb > 1 else 0
        reads = self._reads.get(sub)
        if reads is None:
            reads = self._reads[sub] = self.plan.reads(sub)
        task = ReadTask(
            index=self._index,
            cursor=Cursor(cursor.step, self._version, cursor.sub_step, cursor.sub_steps),
            entries=entries,
            pieces=tuple(reads.pieces),
            assemble=reads.assemble,
        )
        self._index += self.num_workers
        return task
