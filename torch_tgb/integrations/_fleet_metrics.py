"""What a fleet's driver knows about its producers: per-shard tallies, progress, Prometheus.

:class:`ShardTally` folds the workers' live counters and final outcomes into
one :class:`ShardStats` per shard (read from any thread). :class:`FleetMonitor`
reads the namespace's head every second for the committed offsets (the log is
the truth; workers only report what they wrote), drives the progress bar (on
a terminal) or log lines (otherwise), and serves the per-producer stats to
Prometheus when asked.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from torch_tgb.integrations._fleet_types import FleetConfig, FleetReport, ShardOutcome, ShardStats
from torch_tgb.integrations._shards import ShardBoard
from torch_tgb.manifest import Manifest, ManifestState

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from torch_tgb.observability import TGBCollector

__all__ = ["FleetMonitor", "ShardTally"]

log = logging.getLogger("torch_tgb.integrations.ray")

_COUNTERS = ("appended", "bytes", "commit_attempts", "commit_successes", "committed_writes",
             "visibility_lag_sum_s", "visibility_lag_max_s")


@dataclass
class _Tallied:
    attempts: int = 0
    deaths: int = 0
    fenced: int = 0
    running_s: float = 0.0
    committed: int = 0
    worker: str = ""
    started: float | None = None
    live: dict[str, float] | None = None


class ShardTally:
    """Per-shard counters over every attempt of this run; the driver thread writes, anyone reads."""

    def __init__(self, board: ShardBoard) -> None:
        self._board = board
        self._lock = threading.Lock()
        self._shards = [_Tallied() for _ in range(board.count)]
        self._totals = [dict.fromkeys(_COUNTERS, 0.0) for _ in range(board.count)]
        self.reassigned = 0
        self.fenced = 0
        self.deaths = 0

    def started(self, shard: int, worker: str) -> None:
        with self._lock:
            s = self._shards[shard]
            s.attempts, s.worker, s.started, s.live = s.attempts + 1, worker, time.monotonic(), {}

    def live(self, shard: int, snap: dict[str, float]) -> None:
        with self._lock:
            if self._shards[shard].live is not None:
                self._shards[shard].live = dict(snap)

    def live_snapshots(self) -> list[dict[str, float]]:
        """The last progress report of every running attempt (an autoscaler's per-shard signals)."""
        with self._lock:
            return [dict(s.live) for s in self._shards if s.live]

    def _fold(self, shard: int, counters: dict[str, float] | None) -> None:
        s, total = self._shards[shard], self._totals[shard]
        for key in _COUNTERS:
            value = float((counters or {}).get(key, 0.0))
            total[key] = max(total[key], value) if key == "visibility_lag_max_s" else total[key] + value
        if s.started is not None:
            s.running_s += time.monotonic() - s.started
        s.started, s.live, s.worker = None, None, ""

    def ended(self, outcome: ShardOutcome) -> None:
        """An attempt reported back (done, fenced or failed): its final counters replace the live ones."""
        with self._lock:
            self._fold(outcome.shard, {k: getattr(outcome, k) for k in _COUNTERS})

    def detached(self, shard: int, *, died: bool) -> None:
        """An attempt is lost (dead worker) or abandoned (stalled): keep what it last reported."""
        with self._lock:
            self._fold(shard, self._shards[shard].live)
            if died:
                self._shards[shard].deaths += 1
                self.deaths += 1

    def abandoned_ended(self, shard: int, outcome: ShardOutcome | None) -> None:
        with self._lock:
            if outcome is not None and outcome.status == "fenced":
                self._shards[shard].fenced += 1
                self.fenced += 1

    def set_committed(self, head: ManifestState) -> None:
        with self._lock:
            for i, s in enumerate(self._shards):
                state = head.producers.get(self._board.producer_id(i))
                s.committed = state.next_offset if state is not None else 0

    def snapshot(self) -> tuple[ShardStats, ...]:
        with self._lock:
            now = time.monotonic()
            out = []
            for i, s in enumerate(self._shards):
                c = dict(self._totals[i])
                live = s.live or {}
                for key in _COUNTERS:
                    value = float(live.get(key, 0.0))
                    c[key] = max(c[key], value) if key == "visibility_lag_max_s" else c[key] + value
                n = c["committed_writes"]
                out.append(ShardStats(
                    shard=i, producer_id=self._board.producer_id(i), state=self._board.state(i),
                    attempts=s.attempts, committed=s.committed, appended=int(c["appended"]), bytes=int(c["bytes"]),
                    running_s=s.running_s + (now - s.started if s.started is not None else 0.0),
                    commit_attempts=int(c["commit_attempts"]), commit_successes=int(c["commit_successes"]),
                    lag=int(live.get("lag", 0)), deaths=s.deaths, fenced=s.fenced, worker=s.worker,
                    visibility_lag_s=c["visibility_lag_sum_s"] / n if n else 0.0,
                    visibility_lag_max_s=c["visibility_lag_max_s"],
                ))
            return tuple(out)


class FleetMonitor:
    """Committed offsets from the log, a progress bar or log lines, and the optional metrics endpoint."""

    def __init__(
        self, *, ns: str, prefix: str, manifest: Manifest, head: ManifestState, tally: ShardTally,
        board: ShardBoard, config: FleetConfig, total_steps: int | None, enabled: bool | None,
    ) -> None:
        from torch_tgb._progress import progress, progress_enabled

        self.ns, self.prefix, self.manifest, self.tally, self.board, self.config = ns, prefix, manifest, tally, board, config
        self.start_steps = head.num_steps
        self.started = time.monotonic()
        self._steps = head.num_steps
        self._last_read = self._last_log = self.started
        self._show = progress_enabled() if enabled is None else enabled
        self._bar = progress(total=total_steps, desc=f"fleet {prefix}", unit="step", enabled=self._show)
        tally.set_committed(head)
        self.metrics_port: int | None = None
        self._collector: TGBCollector | None = None
        self._server: WSGIServer | None = None
        if config.metrics_port is not None:
            self._serve_metrics(config.metrics_port)

    def _serve_metrics(self, port: int) -> None:
        from torch_tgb.observability import StatsSource, TGBCollector, start_metrics_server

        def source(i: int) -> StatsSource:
            def stats() -> dict[str, Any]:
                s = self.tally.snapshot()[i]
                return {**asdict(s), "mb_per_s": s.mb_per_s, "commit_success_rate": s.commit_success_rate}

            return StatsSource(stats, self.ns, "fleet-producer", self.board.producer_id(i))

        self._collector = TGBCollector([source(i) for i in range(self.board.count)])
        self._server, self.metrics_port = start_metrics_server(port)

    def tick(self, *, force: bool = False) -> None:
        """Every second: re-read the head; advance the bar or, off-terminal, log every ``log_interval_s``."""
        now = time.monotonic()
        if not force and now - self._last_read < 1.0:
            return
        self._last_read = now
        head = self.manifest.head()
        self.tally.set_committed(head)
        self._bar.update(head.num_steps - self._steps)
        self._steps = head.num_steps
        stats = self.tally.snapshot()
        mbps = sum(s.bytes for s in stats) / 1e6 / max(now - self.started, 1e-9)
        running = sum(1 for s in stats if s.state == "running")
        self._bar.set_postfix(shards=f"{self.board.done}/{self.board.count}", running=running,
                              mb_s=f"{mbps:.1f}", refresh=False)
        if not self._show and now - self._last_log >= self.config.log_interval_s:
            self._last_log = now
            log.info("fleet %s: %d steps, shards %d done / %d running / %d waiting, %.1f MB/s", self.prefix,
                     self._steps - self.start_steps, self.board.done, running, self.board.pending, mbps)

    def report(self, *, workers: int, sealed: bool) -> FleetReport:
        self.tick(force=True)
        t = self.tally
        return FleetReport(
            ns=self.ns, num_shards=self.board.count, producers=t.snapshot(), steps=self._steps - self.start_steps,
            elapsed_s=time.monotonic() - self.started, workers=workers, worker_deaths=t.deaths, fenced=t.fenced,
            reassigned=t.reassigned, sealed=sealed,
        )

    def close(self) -> None:
        self._bar.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._collector is not None:
            self._collector.unregister()
