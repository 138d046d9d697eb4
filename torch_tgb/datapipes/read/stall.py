"""Input stall: how long the training thread waits in ``next()`` for each step, and its share of the step.

A step, as the training loop sees it, lasts from one batch handed out to the
next: the trainer's own work, then its wait for data. :class:`StallClock`
is told when each wait began and ended (by the one thread that hands the
batches out) and keeps the total wait, the wait per step and the share of the
steps' time spent waiting (the first step's wait, the open, counts in the
total but not in the share: no step came before it). These are the
``stall_s``, ``stall_per_step_s`` and ``stall_share`` of
:class:`~torch_tgb.datapipes.read.stats.ConsumerStats`, exported with every
other field (``StatsReporter``, Prometheus ``tgb_stall_share``).

When the wait over a window of ``StallPolicy.window`` steps exceeds
``StallPolicy.share`` of their time (default 10%), it logs a warning on the
``torch_tgb.stall`` logger, at most once per ``StallPolicy.every_s`` seconds:
the input pipeline is what made those steps late.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

__all__ = ["StallClock", "StallPolicy"]

log = logging.getLogger("torch_tgb.stall")


@dataclass(frozen=True)
class StallPolicy:
    """When the training thread's wait for data is worth a warning.

    ``share``: warn when waiting takes more than this share of the steps' time
    (``None``: never warn; the figures are kept all the same); ``window``: the
    steps judged together; ``every_s``: at most one warning per this many seconds;
    ``min_wait_s``: a window whose mean wait per step is shorter never warns (a
    loop with next to no work of its own, a benchmark or a test, waits most of
    its short steps without the input pipeline making any step late).
    """

    share: float | None = 0.10
    window: int = 50
    every_s: float = 60.0
    min_wait_s: float = 0.001

    def __post_init__(self) -> None:
        if self.share is not None and not 0.0 <= self.share < 1.0:
            raise ValueError(f"StallPolicy(share={self.share}) must be in [0, 1) or None")
        if self.window < 1 or not self.every_s >= 0 or not self.min_wait_s >= 0:
            raise ValueError(f"StallPolicy needs window >= 1, every_s >= 0 and min_wait_s >= 0, got {self.window}, "
                             f"{self.every_s}, {self.min_wait_s}")


class StallClock:
    """The training thread's waits, one per step (see the module docstring).

    ``what`` names the reader in the warning; ``policy=None`` never warns.
    Written by the one thread that hands batches out; :meth:`figures` may be
    read from any thread (plain numbers).
    """

    def __init__(self, policy: StallPolicy | None = None, *, what: str = "") -> None:
        self.policy = policy
        self.what = what
        self.steps = 0
        self.wait_s = 0.0
        # per step only the totals and the last hand-out move (a few attribute writes: this runs per batch);
        # the share's figures are differences of them
        self._first: float | None = None  # when the first batch was handed out
        self._last = 0.0  # when the last one was
        self._unshared = 0.0  # waits not part of a step's share: the first step's (the open) and the end's
        self._judge_at = math.inf if policy is None or policy.share is None else float(policy.window)
        self._mark = (0.0, 0.0, 0)  # the shared wait, _last and steps where the window began
        self._warned_at = -math.inf

    def waited(self, started: float, ended: float, *, steps: int = 1) -> None:
        """A wait from ``started`` to ``ended`` (seconds of one clock) that handed out ``steps`` batches (0: the end)."""
        self.wait_s += ended - started
        if not steps:
            self._unshared += ended - started
            return
        self.steps += steps
        self._last = ended
        if self._first is None:
            self._first = ended
            self._unshared += ended - started
            self._mark = (self.wait_s - self._unshared, ended, self.steps)
            self._judge_at += self.steps
        elif self.steps >= self._judge_at:
            self._judge(ended)

    def _judge(self, ended: float) -> None:
        """The window of steps since the mark: warn if its wait exceeds the policy's share; start the next."""
        policy = self.policy
        assert policy is not None and policy.share is not None
        wait_mark, last_mark, steps_mark = self._mark
        shared = self.wait_s - self._unshared
        wait, span, n = shared - wait_mark, ended - last_mark, self.steps - steps_mark
        share = wait / span if span > 0 else 0.0
        if share > policy.share and wait / n >= policy.min_wait_s and ended - self._warned_at >= policy.every_s:
            self._warned_at = ended
            log.warning(
                "%sthe training loop waited %.0f%% of its step time for data over the last %d steps "
                "(%.3f ms of %.3f ms per step; warned above %.0f%%, at most every %.0f s: "
                "ReaderOptions(stall=StallPolicy(...)))",
                f"{self.what}: " if self.what else "", share * 100, n, wait / n * 1e3, span / n * 1e3,
                policy.share * 100, policy.every_s,
            )
        self._mark = (shared, ended, self.steps)
        self._judge_at = self.steps + policy.window

    def figures(self) -> dict[str, float]:
        """``stall_s``, ``stall_per_step_s`` and ``stall_share`` (ConsumerStats fields)."""
        return {
            "stall_s": self.wait_s,
            "stall_per_step_s": self.wait_s / self.steps if self.steps else 0.0,
            "stall_share": (self.wait_s - self._unshared) / span if (span := self._last - (self._first or 0.0)) > 0
            else 0.0,
        }
