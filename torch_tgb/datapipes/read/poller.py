"""ManifestPoller: the committed TGBs in step order, waiting for new ones.

The poller is the only stage that reads the manifest. It asks for the head
(newest version, number of steps, sealed flag), fetches entries in batches,
and yields :class:`StepEntry` items for ``start_step, start_step+1, ...``.
Once it has caught up it polls for a newer version, backing off exponentially
from ``min_interval`` to ``max_interval`` while nothing arrives; ``timeout``
bounds one such wait and raises :class:`DataTimeout` naming the namespace, the
step waited for and the last version seen. A sealed version ends the stream.
A wait is never silent: every ``warn_every`` seconds (default 10, ``None``
to turn off) a warning goes to the ``torch_tgb.datapipes.read.poller`` logger
naming the namespace, the step waited for, the last version seen and the
producers' marks (open, closed, done), so a stream whose producers have all
closed without sealing is told apart from one still being written; in a
namespace of declared shards, the shards still missing (not started,
running or stopped) instead.

State: the next step to yield and the newest version seen. Entries buffered
ahead are refetched after a reset, never carried in the state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from torchdata.nodes import BaseNode

from torch_tgb.datapipes.read._types import ManifestView, StepEntry
from torch_tgb.datapipes.read.stats import ReadStats
from torch_tgb.errors import DataTimeout, ManifestError
from torch_tgb.manifest.jobs import describe_missing
from torch_tgb.manifest.records import ManifestState, TGBEntry

__all__ = ["ManifestPoller", "PollPolicy", "describe_producers"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PollPolicy:
    """How often to look for a new version while caught up."""

    min_interval: float = 0.01
    max_interval: float = 1.0
    backoff: float = 2.0
    #: entries fetched per manifest read when behind
    batch: int = 64
    #: seconds between warnings (``logging``) while waiting for a step; None: never warn
    warn_every: float | None = 10.0

    def __post_init__(self) -> None:
        if not (0 < self.min_interval <= self.max_interval) or self.backoff < 1 or self.batch < 1:
            raise ValueError(f"invalid poll policy {self!r}")
        if self.warn_every is not None and self.warn_every <= 0:
            raise ValueError(f"invalid poll policy {self!r}: warn_every must be > 0 or None")


def describe_producers(head: ManifestState, *, now: float | None = None) -> str:
    """One line on a head's producers and what their marks mean for the end of the stream."""
    if head.sealed:
        return "sealed"
    if head.table is not None and head.table.producers > _NAMED_PRODUCERS:
        return _describe_counts(head)  # format 2: the table's counts say it without reading its buckets
    job = head.job
    if job is not None:  # a job of declared shards ends exactly when every shard is done: name the missing
        return (f"{job.describe()}: the stream ends when every shard is done; waiting for "
                f"{describe_missing(job, head.producers)}")
    if not head.producers:
        return "no producer has started yet"
    now = time.time() if now is None else now
    parts = []
    for pid, s in sorted(head.producers.items()):
        ago = f", last commit {max(0.0, now - s.committed_at):.0f}s ago" if s.committed_at else ""
        parts.append(f"{pid} {s.status}{ago}")
    text = "producers: " + "; ".join(parts)
    if all(s.status != "open" for s in head.producers.values()):
        text += (
            " -- every producer is closed, none will commit more, but the namespace is not sealed "
            "(none closed with seal=True; `tgb seal NS` ends the stream): this wait ends only by timeout"
        )
    return text


#: a waiting message names the producers (reading their buckets) up to this many; more are counted
_NAMED_PRODUCERS = 8


def _describe_counts(head: ManifestState) -> str:
    """:func:`describe_producers` from a format-2 table's counts (what a waiting reader can say for free)."""
    table = head.table
    assert table is not None
    job = head.job
    if job is not None:
        return (f"{job.describe()}: the stream ends when every shard is done; {table.declared_done} of {job.size} "
                f"done, {table.open} running, {table.closed} stopped (`tgb inspect` names them)")
    if not table.producers:
        return "no producer has started yet"
    text = f"producers: {table.open} open, {table.closed} closed, {table.done} done"
    if not table.open:
        text += (
            " -- every producer is closed, none will commit more, but the namespace is not sealed "
            "(none closed with seal=True; `tgb seal NS` ends the stream): this wait ends only by timeout"
        )
    return text


class ManifestPoller(BaseNode[StepEntry]):
    """Yields ``StepEntry(step, version, entry)`` from ``start_step`` on.

    ``manifest`` is a :class:`ManifestView` (``head()`` and ``entries(start,
    stop)``); ``namespace`` (default ``manifest.url``) names it in messages. ``stop_step`` (exclusive)
    ends the stream early, for bounded reads.
    """

    NEXT_STEP_KEY = "next_step"
    VERSION_KEY = "version"

    def __init__(
        self,
        manifest: ManifestView,
        start_step: int = 0,
        *,
        timeout: float | None = None,
        policy: PollPolicy = PollPolicy(),
        stop_step: int | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__()
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        self.manifest = manifest
        self.start_step = start_step
        self.timeout = timeout
        self.policy = policy
        self.stop_step = stop_step
        self.stats = ReadStats()  # this node's own counters (the reader merges them)
        self.namespace = namespace or manifest.url
        self._next_step = start_step
        self._version = 0
        self._known_steps = 0
        self._sealed = False
        self._head: ManifestState | None = None
        self._buffer: deque[StepEntry] = deque()
        self._interrupt = threading.Event()

    def state_at(self, step: int, version: int = 0) -> dict[str, int]:
        """The state of this poller positioned at ``step`` (for parents that derive it)."""
        return {self.NEXT_STEP_KEY: step, self.VERSION_KEY: version}

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self._next_step = int(initial_state[self.NEXT_STEP_KEY])
            self._version = int(initial_state.get(self.VERSION_KEY, 0))
        else:
            self._next_step = self.start_step
            self._version = 0
        self._known_steps = 0
        self._sealed = False
        self._buffer.clear()
        self._interrupt.clear()

    def get_state(self) -> dict[str, Any]:
        return self.state_at(self._next_step, self._version)

    def interrupt(self) -> None:
        """Make a wait in progress (another thread) end with StopIteration; reset() re-arms."""
        self._interrupt.set()

    def available(self, limit: int | None = None) -> int:
        """Steps known to be committed that this poller has not yielded yet (no waiting needed)."""
        bound = self._known_steps if self.stop_step is None else min(self._known_steps, self.stop_step)
        return max(0, bound - self._next_step)

    @property
    def next_step(self) -> int:
        return self._next_step

    @property
    def version(self) -> int:
        """Newest manifest version seen so far."""
        return self._version

    def next(self) -> StepEntry:
        if self.stop_step is not None and self._next_step >= self.stop_step:
            raise StopIteration
        if not self._buffer:
            self._fill()
        item = self._buffer.popleft()
        self._next_step = item.step + 1
        return item

    def next_run(self, limit: int) -> tuple[int, int, list[TGBEntry]]:
        """Up to ``limit`` consecutive steps at once: ``(first step, version, entries)``.

        Waits (as :meth:`next` does) only for the first; the others are steps
        already committed. The run path of a local reader takes its steps this
        way: no :class:`StepEntry` per step.
        """
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if self._buffer:  # steps buffered by next(): hand those out first, in order
            item = self.next()
            return item.step, item.version, [item.entry]
        step = self._next_step
        if self.stop_step is not None and step >= self.stop_step:
            raise StopIteration
        if step >= self._known_steps:
            self._wait_for(step)
        stop = min(self._known_steps, step + limit)
        if self.stop_step is not None:
            stop = min(stop, self.stop_step)
        entries = self._entries(step, stop)
        self._next_step = stop
        return step, self._version, entries

    # --- internals -------------------------------------------------------------

    def _poll(self) -> None:
        head = self.manifest.head()
        self.stats.add(manifest_polls=1)
        # A reader never goes back: an older head (a lagging replica) is ignored.
        if head.version >= self._version:
            self._version = int(head.version)
            self._known_steps = int(head.num_steps)
            self._sealed = bool(head.sealed)
            self._head = head

    def _fill(self) -> None:
        step = self._next_step
        if step >= self._known_steps:
            self._wait_for(step)
        stop = min(self._known_steps, step + self.policy.batch)
        if self.stop_step is not None:
            stop = min(stop, self.stop_step)
        entries = self._entries(step, stop)
        self._buffer.extend(StepEntry(step + i, self._version, e) for i, e in enumerate(entries))

    def _entries(self, step: int, stop: int) -> list[TGBEntry]:
        entries = self.manifest.entries(step, stop)
        if len(entries) != stop - step:  # the manifest disagrees with itself: fail loud, never skip
            raise ManifestError(
                f"{self.namespace}: manifest version {self._version} reports {self._known_steps} steps "
                f"but returned {len(entries)} entries for steps [{step}, {stop})"
            )
        return entries

    def _wait_for(self, step: int) -> None:
        """Poll until ``step`` is committed; StopIteration at the seal."""
        started = time.monotonic()
        interval = self.policy.min_interval
        warn_at = self.policy.warn_every
        try:
            while True:
                self._poll()
                if step < self._known_steps:
                    return
                if self._sealed:
                    raise StopIteration
                waited = time.monotonic() - started
                if self.timeout is not None and waited >= self.timeout:
                    raise DataTimeout(
                        f"{self.namespace}: no new step within timeout={self.timeout}s while waiting "
                        f"for {step=}; {self._seen()}"
                    )
                if warn_at is not None and waited >= warn_at:
                    limit = "no timeout (timeout=None)" if self.timeout is None else f"timeout={self.timeout}s"
                    log.warning(
                        "%s: waiting %.0fs for step=%d; %s; %s", self.namespace, waited, step, self._seen(), limit
                    )
                    warn_at += self.policy.warn_every or 0.0
                sleep = interval
                if self.timeout is not None:
                    sleep = min(sleep, max(self.timeout - waited, 0.0))
                if warn_at is not None:
                    sleep = min(sleep, max(warn_at - waited, 0.0))
                if self._interrupt.wait(sleep):
                    raise StopIteration
                interval = min(interval * self.policy.backoff, self.policy.max_interval)
        finally:
            self.stats.add(poll_wait_s=time.monotonic() - started)

    def _seen(self) -> str:
        """The last version seen and its producers, for waiting messages."""
        text = f"last version seen {self._version} ({self._known_steps} steps committed, not sealed)"
        return text if self._head is None else f"{text}; {describe_producers(self._head)}"
