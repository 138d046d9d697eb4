"""What the training loop has consumed, when a framework fetches batches ahead of it.

A plain loop (``for batch in loader: step(batch); save(loader.state_dict())``)
consumes every batch the loader hands out before it asks for the state, so
"handed out" and "consumed" are the same. A framework that fetches ahead is
different: Lightning's fit loop takes the next batch from the loader *before*
it trains the current one (to know whether the current one is the last), and
saves the loader's state in its checkpoint after that; a state of what was
handed out then names one step too many, and the resumed run silently skips a
batch.

:class:`Consumption` fixes that with acknowledgements. The loader hands its
batches out through :meth:`Consumption.hand_out`; a framework adapter (the
Lightning callback in :mod:`torch_tgb.integrations.lightning`) calls
:meth:`track` before the loop trains its first batch and :meth:`consumed`
after each trained batch. While tracking, the state reported is the state
after the last consumed batch: the state the loader had just before it handed
out the oldest batch still held by the framework. Those states are recorded
as the batches go out (only while tracking: one ``state_dict()`` per batch);
the state before the first batch of an iteration is always recorded, because
a framework may fetch that one before its adapter can ask for tracking.

What it does not keep: states across ``load_state_dict`` (loading starts a new
iteration from the loaded position) and, once :meth:`track` is asked for with
two or more batches already handed out, the states between the first and the
last of them (it then reports the earliest state it has, so it replays rather
than skips, and warns).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Consumption"]


class Consumption:
    """Counts batches handed out and consumed in one iteration; keeps the states between the two."""

    __slots__ = ("_states", "began", "consumed_count", "handed", "tracking")

    def __init__(self) -> None:
        self.tracking = False
        self.handed = 0  # batches handed out in this iteration
        self.consumed_count = 0  # of them, the ones the loop acknowledged
        self._states: list[tuple[int, dict[str, Any]]] = []  # (i, state after i batches handed out), i ascending
        self.began: dict[str, Any] | None = None  # the state this iteration began at (None: none began)

    def reset(self) -> None:
        """Forget the current iteration (a new one starts, or a state was loaded)."""
        self.handed = self.consumed_count = 0
        self._states = []
        self.began = None

    def hand_out(self, batches: Iterator[Any], state_now: Callable[[], dict[str, Any]]) -> Iterator[Any]:
        """Yield ``batches``, recording ``state_now()`` before the first one and, while tracking, before each."""
        self.reset()
        self.began = state_now()
        self._states = [(0, self.began)]
        for batch in batches:
            self.handed += 1
            yield batch
            if self.tracking:  # asked for the next batch: the state after `handed`, before fetching it
                self._states.append((self.handed, state_now()))

    def track(self) -> None:
        """From now on, report the state after the last consumed batch (see the module docstring)."""
        self.tracking = True

    def consumed(self, n: int = 1) -> None:
        """The training loop has finished ``n`` more of the batches handed out."""
        if n < 0:
            raise ValueError(f"consumed(n) needs n >= 0, got {n=}")
        if self.consumed_count + n > self.handed:
            warnings.warn(
                f"{self.consumed_count + n} batches acknowledged as consumed, but only {self.handed} were handed out "
                "in this iteration; counting them as all consumed",
                stacklevel=3,
            )
            n = self.handed - self.consumed_count
        self.consumed_count += n
        # keep the latest state at or before the consumed count, and everything after it
        keep = max((k for k, (i, _) in enumerate(self._states) if i <= self.consumed_count), default=0)
        del self._states[:keep]

    def held(self) -> bool:
        """Whether the loop holds batches it has not consumed (then :meth:`state` differs from the live state)."""
        return self.tracking and self.consumed_count < self.handed and bool(self._states)

    def state(self) -> dict[str, Any]:
        """The state after the last consumed batch, or the latest recorded one before it (call when :meth:`held`)."""
        index, state = self._states[0]
        if index != self.consumed_count:  # tracking began with more than one batch out: replay, never skip
            warnings.warn(
                f"consumption tracking began after {self.handed} batches were handed out; the state after "
                f"{self.consumed_count} consumed ones was not recorded, so the state names the one after {index}: "
                "a resume replays batches rather than skipping any",
                stacklevel=3,
            )
        return state
