"""Global batch-size schedules on the read side: training step -> the TGB steps it joins (pure).

``ReaderOptions(batch_schedule=[(0, 256), (2000, 512), (4000, 1024)])`` says
that training steps ``0..1999`` take 256 rows, ``2000..3999`` 512 and
``4000..`` 1,024 (Megatron's ``rampup_batch_size``, stepwise). With TGBs of
``G`` rows (the producers' ``global_batch_size``: write small ones, "micro
TGBs", to ramp in fine steps) training step ``t`` reads the ``B(t) / G``
consecutive TGBs from ``S(t) = sum of B(u) / G over u < t``:

    B(t)            256 256 ... 256 | 512 512 ... | 1024 ...
    TGBs (G = 128)  [0,2) [2,4) ... | [4000,4004) | [12000,12008) ...

Both directions are closed forms over the schedule's segments
(:meth:`BatchSchedule.start`, :meth:`BatchSchedule.step_at`), so a cursor in
TGB steps, which is what checkpoints and watermarks hold, names the training
step exactly, whatever the world size that saved it: a restart, a world-size
change and a ramp boundary all continue at ``S(t)``. Property-tested in
``tests/consumer/test_batch_schedule.py``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from torch_tgb.errors import LayoutError

__all__ = ["BatchSchedule", "ScheduleStep", "batch_ramp"]


@dataclass(frozen=True)
class ScheduleStep:
    """One training step of a schedule: its index, its global batch size, the TGB steps ``[first, stop)`` it joins."""

    step: int
    batch_size: int
    first: int
    stop: int


@dataclass(frozen=True)
class BatchSchedule:
    """A piecewise-constant global batch size (rows) over training steps; ``points[0]`` is at step 0."""

    points: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, value: BatchSchedule | Sequence[Sequence[int]]) -> BatchSchedule:
        """``[(step, rows), ...]``: steps strictly increasing from 0, rows >= 1; a ``ValueError`` otherwise."""
        if isinstance(value, BatchSchedule):
            return value
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
            raise ValueError(f"batch_schedule must be a non-empty list of (step, rows), got {value!r}")
        points = []
        for point in value:
            if isinstance(point, (str, bytes)) or not isinstance(point, Sequence) or len(point) != 2:
                raise ValueError(f"batch_schedule entry {point!r} is not a (step, rows) pair")
            step, rows = point
            if any(isinstance(x, bool) or not isinstance(x, int) for x in (step, rows)) or step < 0 or rows < 1:
                raise ValueError(f"batch_schedule entry {tuple(point)!r}: step must be an int >= 0, rows an int >= 1")
            points.append((step, rows))
        if points[0][0] != 0:
            raise ValueError(f"batch_schedule must start at step 0, got {points[0]}")
        if any(b[0] <= a[0] for a, b in pairwise(points)):
            raise ValueError(f"batch_schedule steps must increase strictly, got {[p[0] for p in points]}")
        return cls(tuple(points))

    def size(self, step: int) -> int:
        """``B(step)``: the global batch size (rows) of training ``step``."""
        if step < 0:
            raise LayoutError(f"negative training {step=}")
        return self.points[bisect_right([s for s, _ in self.points], step) - 1][1]

    def tgbs(self, step: int, rows_per_tgb: int) -> int:
        """TGBs training ``step`` joins: ``B(step) / G``; a :class:`LayoutError` when ``G`` does not divide it."""
        size = self.size(step)
        if rows_per_tgb < 1 or size % rows_per_tgb:
            raise LayoutError(
                f"batch_schedule: training step {step} takes {size} rows, not a multiple of the namespace's "
                f"{rows_per_tgb} rows per TGB; every batch size must be (write smaller TGBs to ramp finer)"
            )
        return size // rows_per_tgb

    def _bounds(self, rows_per_tgb: int) -> list[int]:
        """``S`` at each point's step (checked: every size a multiple of ``G``)."""
        out = [0]
        for (s0, b0), (s1, _) in pairwise(self.points):
            out.append(out[-1] + (s1 - s0) * self.tgbs(s0, rows_per_tgb))
        self.tgbs(self.points[-1][0], rows_per_tgb)
        return out

    def start(self, step: int, rows_per_tgb: int) -> int:
        """``S(step)``: the first TGB step of training ``step`` (TGB steps counted from 0)."""
        if step < 0:
            raise LayoutError(f"negative training {step=}")
        i = bisect_right([s for s, _ in self.points], step) - 1
        return self._bounds(rows_per_tgb)[i] + (step - self.points[i][0]) * self.tgbs(self.points[i][0], rows_per_tgb)

    def step_at(self, tgb: int, rows_per_tgb: int) -> int:
        """The training step starting at TGB step ``tgb`` (inverse of :meth:`start`).

        A :class:`LayoutError` when ``tgb`` falls inside a training step: a cursor
        taken without this schedule (or with another) cannot continue it.
        """
        if tgb < 0:
            raise LayoutError(f"negative TGB step {tgb}")
        bounds = self._bounds(rows_per_tgb)
        i = bisect_right(bounds, tgb) - 1
        per = self.tgbs(self.points[i][0], rows_per_tgb)
        into, extra = divmod(tgb - bounds[i], per)
        step = self.points[i][0] + into
        if i + 1 < len(self.points) and step >= self.points[i + 1][0]:  # pragma: no cover - bisect rules it out
            raise LayoutError(f"TGB step {tgb} lies past its segment")
        if extra:
            raise LayoutError(
                f"batch_schedule: TGB step {tgb} lies inside training step {step} (TGB steps "
                f"[{self.start(step, rows_per_tgb)}, {self.start(step + 1, rows_per_tgb)})): a position saved "
                "without this schedule, or with another one, cannot continue it; resume from a step boundary of "
                "this schedule"
            )
        return step

    def at(self, step: int, rows_per_tgb: int) -> ScheduleStep:
        """Training ``step`` with its size and TGB range."""
        first = self.start(step, rows_per_tgb)
        return ScheduleStep(step, self.size(step), first, first + self.tgbs(step, rows_per_tgb))

    def steps_within(self, num_tgbs: int, rows_per_tgb: int) -> int:
        """How many whole training steps the TGB steps ``[0, num_tgbs)`` hold (a sealed pass's length)."""
        bounds = self._bounds(rows_per_tgb)
        i = bisect_right(bounds, num_tgbs) - 1
        return self.points[i][0] + (num_tgbs - bounds[i]) // self.tgbs(self.points[i][0], rows_per_tgb)

    def to_json(self) -> list[list[int]]:
        return [list(p) for p in self.points]


def batch_ramp(start: int, stop: int, *, increment: int, steps: int) -> list[tuple[int, int]]:
    """``batch_schedule`` points ramping from ``start`` to ``stop`` rows in ``increment``s over ``steps`` steps.

    Megatron's ``rampup_batch_size=[start, increment, samples]`` counted in
    training steps: the ``n = (stop - start) / increment + 1`` sizes hold for
    an equal share of ``steps`` each (``floor(i * steps / n)`` is where size
    ``i`` begins), and ``stop`` stays from the last share on.
    """
    if start < 1 or stop < start or increment < 1 or (stop - start) % increment or steps < 0:
        raise ValueError(f"batch_ramp({start=}, {stop=}, {increment=}, {steps=}): needs 1 <= start <= stop, "
                         "stop - start a multiple of increment >= 1, steps >= 0")
    n = (stop - start) // increment + 1
    points: list[tuple[int, int]] = []
    for i in range(n):
        step, rows = i * steps // n, start + i * increment
        if points and points[-1][0] == step:  # fewer steps than sizes: a size of no steps is left out
            points[-1] = (step, rows)
        else:
            points.append((step, rows))
    return points
