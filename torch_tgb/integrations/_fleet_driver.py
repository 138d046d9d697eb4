"""The driver loop of a fleet: shards to ready workers, outcomes back, dead and stalled workers replaced.

:class:`FleetDriver` runs on the :class:`~torch_tgb.integrations.ray.Fleet`'s
driver thread and is the only code that changes the board, the workers and
the tally while the fleet runs. Each round: apply the wanted pool size
(requeueing the shards of removed workers), assign pending shards to ready
workers, collect finished attempts and probes, poll progress (a worker
without progress for ``stall_timeout_s`` is abandoned and its shard
reassigned), and tick the monitor.
"""

from __future__ import annotations

import logging
import threading
import time
from types import ModuleType

from torch_tgb.errors import FleetError
from torch_tgb.integrations._fleet_metrics import FleetMonitor, ShardTally
from torch_tgb.integrations._fleet_types import FleetConfig, ShardOutcome
from torch_tgb.integrations._ray_pool import Worker, WorkerPool
from torch_tgb.integrations._scaler import Autoscaler
from torch_tgb.integrations._shards import ShardBoard

__all__ = ["FleetDriver"]

log = logging.getLogger("torch_tgb.integrations.ray")


class FleetDriver:
    """Runs one fleet's shards on ``pool`` until every shard on ``board`` is done. Driver thread only.

    ``ray`` is the imported module. A worker that dies loses its shard back
    to the queue (after ``config.max_shard_attempts`` deaths of one shard the
    fleet fails); past ``max_restarts`` Ray will not restart it, and a fresh
    actor takes its place.
    """

    def __init__(
        self, ray: ModuleType, pool: WorkerPool, board: ShardBoard, tally: ShardTally, monitor: FleetMonitor,
        config: FleetConfig, *, ns: str, prefix: str, max_restarts: int, scaler: Autoscaler | None = None,
    ) -> None:
        self._ray = ray
        self._pool = pool
        self._board = board
        self._tally = tally
        self._monitor = monitor
        self.config = config
        self.ns = ns
        self.prefix = prefix
        self.max_restarts = max_restarts
        self.scaler = scaler
        self._abandoned: list[Worker] = []

    def run(self, stop: threading.Event) -> None:
        """Drive until every shard is done, then wait for abandoned attempts; :class:`FleetError` if ``stop`` is set."""
        while not self._board.all_done:
            if stop.is_set():
                raise FleetError(f"{self.ns}: fleet {self.prefix!r} stopped with "
                                 f"{self._board.count - self._board.done} shards unfinished")
            if self.scaler is not None:
                self.scaler.tick()  # autoscaling: the pool's target from this round's signals
            for busy in self._pool.apply_scale():
                self._release(busy, reason="removed by scale()")
            self._assign()
            self._collect(self.config.poll_interval_s)
            self._poll_progress()
            self._monitor.tick()
        self._drain()

    def kill_all(self) -> None:
        """Kill every actor, abandoned ones included (the fleet has ended, or failed)."""
        for w in self._pool.workers + self._abandoned:
            self._pool.kill(w)

    def _release(self, worker: Worker, *, reason: str) -> None:
        shard = worker.shard
        assert shard is not None
        log.info("fleet %s: shard %d (%s) leaves %s: %s", self.prefix, shard, self._board.producer_id(shard),
                 worker.name, reason)
        self._board.requeue(shard)
        self._tally.detached(shard, died=False)
        self._tally.reassigned += 1
        worker.shard = worker.ref = worker.progress_ref = None

    def _assign(self) -> None:
        self._pool.send_probes()
        for w in self._pool.workers:
            if w.ready:
                shard = self._board.claim(w.name, w.group)
                if shard is None:
                    return
                w.shard, w.last_progress, w.last_change = shard, (), None
                w.ref = w.handle.run_shard.remote(shard, self._board.count, self._board.producer_id(shard))
                self._tally.started(shard, w.name)

    def _collect(self, timeout: float) -> None:
        by_ref = {w.ref: w for w in self._pool.workers + self._abandoned if w.ref is not None}
        probes = self._pool.probes()
        if not by_ref and not probes:
            time.sleep(timeout)
            return
        ready, _ = self._ray.wait([*by_ref, *probes], num_returns=len(by_ref) + len(probes), timeout=timeout)
        for ref in ready:
            if ref in probes:
                self._pool.probed(probes[ref])
                continue
            worker = by_ref[ref]
            try:
                outcome: ShardOutcome | None = self._ray.get(ref)
            except self._ray.exceptions.RayError as e:
                outcome = None
                died = e
            if worker in self._abandoned:
                self._abandoned.remove(worker)
                self._tally.abandoned_ended(worker.shard or 0, outcome)
                self._pool.kill(worker)
                continue
            shard = worker.shard
            assert shard is not None
            worker.ref = worker.progress_ref = None
            if outcome is None:
                self._worker_died(worker, died)
                continue
            worker.shard = None
            self._tally.ended(outcome)
            if outcome.status == "done":
                self._board.finish(shard)
            elif outcome.status == "fenced":
                raise FleetError(
                    f"{self.ns}: shard {shard} producer {outcome.producer_id!r} was fenced by an incarnation "
                    f"outside this fleet (is another fleet with prefix {self.prefix!r} running?): {outcome.error}"
                )
            else:
                raise FleetError(
                    f"{self.ns}: shard {shard} producer {outcome.producer_id!r} failed on {worker.name}: "
                    f"{outcome.error}"
                )

    def _worker_died(self, worker: Worker, error: BaseException) -> None:
        shard = worker.shard
        assert shard is not None
        worker.shard = None
        worker.deaths += 1
        self._tally.detached(shard, died=True)
        pid = self._board.producer_id(shard)
        log.warning("fleet %s: worker %s died running shard %d (%s): %s; requeued", self.prefix, worker.name,
                    shard, pid, type(error).__name__)
        self._board.requeue(shard)
        if self._board.attempts(shard) >= self.config.max_shard_attempts:
            raise FleetError(
                f"{self.ns}: shard {shard} producer {pid!r}: its worker died {self._board.attempts(shard)} times "
                f"(max_shard_attempts={self.config.max_shard_attempts}); last: {error}"
            ) from error
        if worker.deaths > self.max_restarts:  # Ray will not restart it again: a fresh actor takes its place
            self._pool.replace(worker)
        else:
            self._pool.probe_later(worker)

    def _poll_progress(self) -> None:
        now = time.monotonic()
        for w in list(self._pool.workers):
            if w.shard is None:
                continue
            if w.progress_ref is None:
                w.progress_ref = w.handle.progress.remote()
                continue
            ready, _ = self._ray.wait([w.progress_ref], timeout=0)
            if ready:
                try:
                    snap = self._ray.get(w.progress_ref)
                except self._ray.exceptions.RayError:
                    snap = None
                w.progress_ref = None
                if snap is not None and int(snap["shard"]) == w.shard:
                    self._tally.live(w.shard, snap)
                    key = (snap["appended"], snap["bytes"], snap["commit_attempts"])
                    if key != w.last_progress or w.last_change is None:
                        w.last_progress, w.last_change = key, now
            # the clock starts at the attempt's first report: starting an actor may take long
            stall = self.config.stall_timeout_s
            if stall is not None and w.last_change is not None and now - w.last_change > stall:
                self._abandon(w)

    def _abandon(self, worker: Worker) -> None:
        shard = worker.shard
        assert shard is not None
        log.warning("fleet %s: shard %d (%s) made no progress on %s for %.0f s; giving it to a fresh worker "
                    "(the stalled one is fenced if it comes back)", self.prefix, shard,
                    self._board.producer_id(shard), worker.name, self.config.stall_timeout_s)
        self._pool.remove(worker)
        self._board.requeue(shard)
        self._tally.detached(shard, died=False)
        self._tally.reassigned += 1
        worker.progress_ref = None
        self._abandoned.append(worker)  # keeps .shard and .ref: its outcome is still collected

    def _drain(self) -> None:
        deadline = time.monotonic() + self.config.drain_timeout_s
        while self._abandoned and time.monotonic() < deadline:
            self._collect(self.config.poll_interval_s)
        for w in self._abandoned:
            log.warning("fleet %s: stalled worker %s (shard %s) did not come back; killed", self.prefix, w.name,
                        w.shard)
