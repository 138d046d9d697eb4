"""A discrete-event model of N producers committing to one manifest log, in simulated time (no sleeping).

It runs the package's own commit policies (``DACPolicy`` and the baselines)
inside a copy of the commit loop's decisions (``producer/_commit_loop.py``:
the policy's ``wait_time``, ``max_commit_delay_s``, ``max_pending``
backpressure, ``MAX_VERSION_ENTRIES``) over the commit protocol's requests
(``manifest/commit.py``), each costing one round trip ``rtt`` as in
``storage/latency.py``, plus an exponentially distributed delay of mean
``overhead_s`` (thread wake-ups, CPU: without it producers in step stay
exactly in step, which real ones do not): a read sees the log as it is when
the request starts, a write lands when it ends. An attempt:

0. **check** that no newer incarnation registered (one HEAD, before the
   refresh: outside the fragile window);
1. **refresh**: today's rebase reads versions ``view+1, view+2, ...`` one
   after another until one is missing (a version read back after a conflict
   is cached); ``rebase="constant"`` costs two round trips whatever the gap
   (what the manifest redesign gives). The read that finds the slot empty
   opens the fragile window;
2. **create** the next slot, landing one rtt later: a conflict if another
   write landed inside the window (W = 2 rtt);
3. a conflict reads the slot back (one GET); a success reads the GC boundary
   (a LIST and a GET) and writes a snapshot every ``snapshot_every`` versions
   (a GET and two PUTs).

Registration (``Committer.start``) is modelled the same way: a cold
``head()`` (5 requests, 2 probes per doubling of the log, the versions read
16 at a time), then bump attempts with the package's own ``Backoff``.
Producer ``i`` produces a TGB every ``tgb_interval_s`` (one data PUT each,
counted apart from the manifest's requests).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from torch_tgb.manifest._backoff import Backoff
from torch_tgb.manifest.records import MAX_VERSION_ENTRIES
from torch_tgb.producer import CommitPolicy, DACPolicy
from torch_tgb.producer import dac as dac_math

#: S3's request rate per prefix (GET/HEAD; PUT/LIST/DELETE get 3,500): the log lives under one prefix
S3_PREFIX_LIMIT = 5500.0

#: waits shorter than this count as 0 (``now + 1e-16`` is ``now`` in floating point: no progress)
_TICK = 1e-9

Sim = Generator[float, None, Any]  # a process: yields the simulated time at which it resumes


class CapAfterJitterDAC(DACPolicy):
    """DAC as it was before issue 42: gap = ``min(max_gap_s, jittered(target))``, no random first gap.

    For before/after tables only: at the cap every producer waits exactly
    ``max_gap_s``, so producers started together stay in phase.
    """

    name = "dac_before"

    def on_attempt(self, *, success: bool, window_s: float, active_producers: int) -> None:
        c = self.config
        self._window = dac_math.ema(self._window, window_s, c.ema_weight)
        self._producers = max(1, active_producers)
        target = dac_math.optimal_gap(self._window, self._producers, epsilon_c=c.epsilon_c, epsilon_d=c.epsilon_d)
        u = self._rng.uniform(-c.jitter, c.jitter)
        self._gap = min(c.max_gap_s, dac_math.jittered(target, c.jitter, u))


@dataclass(frozen=True)
class ModelConfig:
    """One run: ``producers`` started together, measured from ``warmup_s`` to ``warmup_s + window_s``."""

    producers: int
    window_s: float
    warmup_s: float = 0.0
    tgb_interval_s: float = 1.0
    rtt_s: float = 0.020
    overhead_s: float = 0.002
    rebase: str = "per_version"  # or "constant"
    max_pending: int = 256
    max_commit_delay_s: float = 300.0
    snapshot_every: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rebase not in ("per_version", "constant"):
            raise ValueError(f"rebase={self.rebase!r}: 'per_version' (today) or 'constant'")


class _Log:
    """The shared log: landing time of each version, in order (version v+1 is written only by one who read v)."""

    def __init__(self) -> None:
        self.landed: list[float] = []

    @property
    def newest(self) -> int:
        return len(self.landed)

    def create(self, slot: int, at: float) -> bool:
        if self.newest >= slot:
            return False
        self.landed.append(at)
        return True


@dataclass
class _Producer:
    index: int
    policy: CommitPolicy
    view: int = 0
    cached: set[int] = field(default_factory=set)  # versions read back after a conflict, above the view
    pending: deque[float] = field(default_factory=deque)  # when each pending entry's object was written
    next_tgb: float = 0.0  # when the next TGB is due
    unblocked_at: float = 0.0  # appends wait for room (max_pending) until then
    last_end: float = -math.inf


@dataclass
class _Outcome:
    success: bool
    window_s: float
    requests: int
    reads: int


@dataclass
class Tally:
    """Counts over the measured window (attempts are counted when they end)."""

    attempts: int = 0
    conflicts: int = 0
    entries: int = 0
    requests: int = 0
    reads: int = 0
    data_puts: int = 0
    window_sum: float = 0.0
    gap_sum: float = 0.0


class _Kernel:
    """Processes resumed in simulated-time order (ties: first scheduled first)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Sim]] = []
        self._seq = 0

    def spawn(self, process: Sim, at: float) -> None:
        heapq.heappush(self._heap, (at, self._seq, process))
        self._seq += 1

    def run(self, until: float = math.inf) -> None:
        while self._heap and self._heap[0][0] <= until:
            self.now, _, process = heapq.heappop(self._heap)
            try:
                self.spawn(process, next(process))
            except StopIteration:
                pass


class _Protocol:
    """The requests of one attempt against the shared log (manifest/commit.py), in simulated time."""

    def __init__(
        self, kernel: _Kernel, log: _Log, *, rtt_s: float, overhead_s: float, rebase: str, snapshot_every: int,
        seed: int,
    ) -> None:
        self.kernel, self.log = kernel, log
        self.rtt, self.overhead, self.rebase, self.snapshot_every = rtt_s, overhead_s, rebase, snapshot_every
        self._rng = random.Random(seed)

    def took(self, requests: int) -> float:
        """Seconds that ``requests`` requests one after another take: round trips plus their overheads."""
        if requests <= 0:
            return 0.0
        extra = self._rng.gammavariate(requests, self.overhead) if self.overhead > 0 else 0.0
        return requests * self.rtt + extra

    def head(self, p: _Producer) -> Sim:
        """A cold ``Manifest.head()``: hint, probes, boundary, snapshot LIST, then the versions, 16 at a time."""
        t = self.kernel.now + self.took(1)  # the hint
        yield t
        newest = self.log.newest
        probes = 1 + 2 * math.ceil(math.log2(newest + 1)) if newest else 1
        requests = 4 + probes + newest
        t += self.took(3 + probes + math.ceil(newest / 16))
        p.view = newest
        yield t
        return requests

    def attempt(self, p: _Producer) -> Sim:
        """Refresh, create the next slot, then read it back (conflict) or the boundary (success)."""
        log = self.log
        t = self.kernel.now + self.took(1)  # is a newer incarnation registered? (before the refresh)
        yield t
        reads = 0
        if self.rebase == "per_version":
            while log.newest > p.view:  # versions landed before now: read one after another
                newer = log.newest
                uncached = newer - p.view - sum(1 for v in p.cached if p.view < v <= newer)
                p.view = newer
                if uncached:
                    reads += uncached
                    t += self.took(uncached)
                    yield t  # more may land while we read
        else:
            reads += 1
            t += self.took(1)
            yield t
            p.view = log.newest
        read_at = t  # this read finds slot view+1 empty: the fragile window opens
        reads += 1
        p.cached = {v for v in p.cached if v > p.view}
        landed = read_at + self.took(2)
        yield landed
        slot = p.view + 1
        if not log.create(slot, landed):
            p.cached.add(slot)  # read back (it is not ours): cached for the next refresh
            end = landed + self.took(1)
            yield end
            return _Outcome(False, end - read_at, reads + 3, reads + 1)
        p.view = slot
        extra = 2 + (3 if slot % self.snapshot_every == 0 else 0)  # boundary LIST + GET; snapshot GET + 2 PUTs
        yield landed + self.took(extra)
        return _Outcome(True, landed - read_at, reads + 2 + extra, reads)


def _decide(p: _Producer, now: float, *, max_commit_delay_s: float) -> tuple[float, bool] | None:
    """CommitLoop._next_batch: seconds to wait (0: attempt now) and whether an append may change it; None: idle."""
    if not p.pending:
        return None
    wait = p.policy.wait_time(len(p.pending), now - p.last_end)
    overdue = max(0.0, p.pending[0] + max_commit_delay_s - now)
    if wait is None:  # a count policy waits for entries (woken by each append), or for the oldest to be overdue
        return overdue, True
    return min(wait, overdue), False


class CommitModel:
    """N producers with their own policies, started together, committing to one log."""

    def __init__(self, config: ModelConfig, policy: Callable[[int], CommitPolicy]) -> None:
        self.config = config
        self.kernel = _Kernel()
        self.log = _Log()
        self.protocol = _Protocol(self.kernel, self.log, rtt_s=config.rtt_s, overhead_s=config.overhead_s,
                                  rebase=config.rebase, snapshot_every=config.snapshot_every, seed=config.seed)
        self.producers = [_Producer(i, policy(i)) for i in range(config.producers)]
        self.last_commit = np.zeros(config.producers)  # committed_at in the log: all registered at t = 0
        self.tally = Tally()

    def _measured(self, t: float) -> bool:
        return self.config.warmup_s <= t < self.config.warmup_s + self.config.window_s

    def _append_due(self, p: _Producer, now: float) -> None:
        """TGBs due by ``now`` whose object is written (one PUT each), while there is room (``max_pending``)."""
        c = self.config
        while len(p.pending) < c.max_pending:
            written = max(p.next_tgb, p.unblocked_at) + c.rtt_s
            if written > now:
                return
            p.pending.append(written)
            p.next_tgb += c.tgb_interval_s
            self.tally.data_puts += self._measured(written)

    def _next_append(self, p: _Producer) -> float:
        if len(p.pending) >= self.config.max_pending:
            return math.inf  # blocked until a commit makes room
        return max(p.next_tgb, p.unblocked_at) + self.config.rtt_s

    def _active(self, p: _Producer, now: float) -> int:
        """CommitLoop._active_producers: others who committed within the policy's horizon, and us."""
        recent = int(np.count_nonzero(self.last_commit >= now - p.policy.active_horizon_s))
        return recent - int(self.last_commit[p.index] >= now - p.policy.active_horizon_s) + 1

    def _loop(self, p: _Producer) -> Sim:
        c, k = self.config, self.kernel
        limit = min(p.policy.max_entries or MAX_VERSION_ENTRIES, MAX_VERSION_ENTRIES)
        while True:
            self._append_due(p, k.now)
            decided = _decide(p, k.now, max_commit_delay_s=c.max_commit_delay_s)
            if decided is None or decided[0] > _TICK:
                wake = self._next_append(p)
                if decided is not None:
                    wake = min(wake, k.now + decided[0]) if decided[1] else k.now + decided[0]
                yield wake
                continue
            batch = min(len(p.pending), limit)
            outcome: _Outcome = yield from self.protocol.attempt(p)
            now = k.now
            if outcome.success:
                was_full = len(p.pending) >= c.max_pending
                for _ in range(batch):
                    p.pending.popleft()
                if was_full:
                    p.unblocked_at = now
                self.last_commit[p.index] = now
            active = self._active(p, now)
            p.policy.on_attempt(success=outcome.success, window_s=outcome.window_s, active_producers=active)
            p.last_end = now
            if self._measured(now):
                t = self.tally
                t.attempts += 1
                t.conflicts += not outcome.success
                t.entries += batch if outcome.success else 0
                t.requests += outcome.requests
                t.reads += outcome.reads
                t.window_sum += outcome.window_s
                t.gap_sum += p.policy.gap_s

    def run(self) -> dict[str, Any]:
        c = self.config
        for p in self.producers:
            self.kernel.spawn(self._loop(p), 0.0)
        self.kernel.run(until=c.warmup_s + c.window_s)
        return summarise(self.tally, c)


def summarise(t: Tally, c: ModelConfig) -> dict[str, Any]:
    """Per-run figures: conflict rate, commits/s, entries per version, requests per commit, requests/s."""
    commits = t.attempts - t.conflicts
    per_s = (t.requests + t.data_puts) / c.window_s
    return {
        "producers": c.producers, "rebase": c.rebase, "attempts": t.attempts,
        "conflict_rate": t.conflicts / t.attempts if t.attempts else None,
        "commits_per_s": commits / c.window_s,
        "entries_per_version": t.entries / commits if commits else None,
        "requests_per_commit": t.requests / commits if commits else None,
        "reads_per_commit": t.reads / commits if commits else None,
        "tgb_per_s": t.entries / c.window_s, "offered_tgb_per_s": c.producers / c.tgb_interval_s,
        "requests_per_s": per_s, "manifest_requests_per_s": t.requests / c.window_s,
        "prefix_load": t.requests / c.window_s / S3_PREFIX_LIMIT,
        "mean_window_ms": 1e3 * t.window_sum / t.attempts if t.attempts else None,
        "mean_gap_s": t.gap_sum / t.attempts if t.attempts else None,
    }


def simulate(config: ModelConfig, policy: Callable[[int], CommitPolicy]) -> dict[str, Any]:
    """Run the commit model once; see :func:`summarise` for the figures."""
    return CommitModel(config, policy).run()


def simulate_registration(
    producers: int, *, backoff: Backoff, rtt_s: float = 0.020, overhead_s: float = 0.002, rebase: str = "per_version",
    snapshot_every: int = 16, seed: int = 0,
) -> dict[str, Any]:
    """``producers`` committers calling ``start()`` together: requests, attempts and seconds until all are in."""
    kernel, log, rng = _Kernel(), _Log(), random.Random(seed)
    protocol = _Protocol(kernel, log, rtt_s=rtt_s, overhead_s=overhead_s, rebase=rebase,
                         snapshot_every=snapshot_every, seed=seed + 1)
    done: list[float] = []
    totals = {"requests": 0, "attempts": 0, "reads": 0}

    def start(p: _Producer) -> Sim:
        totals["requests"] += yield from protocol.head(p)
        conflicts = 0
        while True:
            outcome: _Outcome = yield from protocol.attempt(p)
            totals["requests"] += outcome.requests
            totals["reads"] += outcome.reads
            totals["attempts"] += 1
            if outcome.success:
                done.append(kernel.now)
                return
            conflicts += 1
            yield kernel.now + backoff.delay(conflicts, rng.random())

    for i in range(producers):
        kernel.spawn(start(_Producer(i, DACPolicy())), 0.0)
    kernel.run()
    done.sort()
    return {
        "producers": producers, "rebase": rebase, "backoff": [backoff.base_s, backoff.cap_s], **totals,
        "requests_per_producer": totals["requests"] / producers,
        "attempts_per_producer": totals["attempts"] / producers,
        "seconds": done[-1], "p50_s": done[len(done) // 2],
    }
