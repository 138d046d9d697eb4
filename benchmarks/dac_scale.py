"""DAC and registration at N = 8-1,024: the commit model, validated against real producers (issue 42).

Three tables, before (DAC capped after the jitter, 30 s cap, ±20 %; epoch
bumps retried at once) and after (capped, then jittered, a cap growing as
N - 1 under the 300 s ceiling, a random first gap; registration backoff):

1. **model**, default settings, producers started together, a TGB every
   ``--tgb-interval`` s each, steady state after a warm-up (and at N = 1,024
   once more with ``max_commit_delay_s = ceiling_s = 1,200 s``): conflict rate,
   commits/s, entries per version, manifest requests per successful commit
   (today's rebase: one GET per version since the producer's view, one
   after another; and a rebase of a constant 2 round trips, what the
   manifest redesign gives), the log's requests/s against S3's 5,500/s per prefix;
2. **registration** by an epoch bump in the log (what ``start()`` did before
   registration objects: ``_log_bump.py``; ``registration.py`` measures
   today's against it): N committers calling ``start()`` together: requests,
   bump attempts per producer and seconds until all are in, model
   (both rebases) and measured (real committers, N = 8 and 64);
3. **validation**: real ``Producer`` threads (N = 8 and 64) on a
   ``CountingStore`` over a ``LatencyStore`` (rtt 20 ms) over a
   ``MemoryStore`` against the model of the same run, side by side. DAC's
   default gaps (6 s at N = 8, 49 s at 64) need minutes per cycle, so these
   runs use ``max_gap_s = 1 s`` (caps of 1 s and 2 s): seconds-long runs
   with many cycles, the regime where the old rule locks producers in step.

Model, not a measured remote store: every request costs one round trip
(20 ms, first byte), as ``storage/latency.py`` models it.

    python benchmarks/dac_scale.py [--quick] [--skip-measured]
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _commit_model import CapAfterJitterDAC, ModelConfig, simulate, simulate_registration
from _common import add_results_arg, results_dir, save
from _log_bump import LogBumpCommitter

from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.manifest._backoff import Backoff
from torch_tgb.producer import CommitPolicy, DACConfig, DACPolicy, Producer
from torch_tgb.producer.dac import optimal_gap
from torch_tgb.storage import LatencyStore, MemoryStore
from torch_tgb.testing.counting import CountingStore

RTT = 0.020
OLD = DACConfig(jitter=0.2)  # the defaults before issue 42 (the cap and first gap are CapAfterJitterDAC's rule)
VARIANTS: dict[str, tuple[Callable[[DACConfig | None, int], CommitPolicy], Backoff]] = {
    "before": (lambda c, i: CapAfterJitterDAC(c or OLD, seed=i), Backoff(0.0, 0.0)),
    "after": (lambda c, i: DACPolicy(c, seed=i), Backoff()),
}


def _cycle_s(n: int, variant: str) -> float:
    """A producer's expected cycle (gap + its refresh): how long the model must run."""
    target = optimal_gap(2 * RTT, n)
    gap = min(target, 30.0) if variant == "before" else min(target, 300.0 / 1.1)
    return max(1.0, gap + n * RTT)


def model_rows(ns: list[int], *, tgb_interval_s: float, min_attempts: int) -> list[dict[str, Any]]:
    rows = []
    for n in ns:
        for variant, (policy, _) in VARIANTS.items():
            cycle = _cycle_s(n, variant)
            row: dict[str, Any] = {"n": n, "variant": variant}
            for rebase in ("per_version", "constant"):
                window = max(10 * cycle, min_attempts * cycle / n)
                config = ModelConfig(producers=n, warmup_s=3 * cycle, window_s=window, tgb_interval_s=tgb_interval_s,
                                     rtt_s=RTT, rebase=rebase)
                started = time.perf_counter()
                result = simulate(config, lambda i: policy(None, i))
                row[rebase] = result
                print(f"model N={n:5d} {variant:6} {rebase:11}: conflicts {100 * result['conflict_rate']:5.1f}%, "
                      f"{result['commits_per_s']:.2f} commits/s, {result['entries_per_version']:.0f} entries/version, "
                      f"{result['requests_per_commit']:.1f} requests/commit, {result['prefix_load']:.3f}x prefix limit "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
            rows.append(row)
    if 1024 in ns:  # what holds the budget at 1,024: the producer's deadline (and room) raised with the ceiling
        deadline = 1200.0
        row = {"n": 1024, "variant": f"after, deadline {deadline:,.0f} s"}
        for rebase in ("per_version", "constant"):
            config = ModelConfig(producers=1024, warmup_s=3 * deadline, window_s=6 * deadline, rebase=rebase,
                                 tgb_interval_s=tgb_interval_s, rtt_s=RTT, max_commit_delay_s=deadline,
                                 max_pending=2048)
            row[rebase] = result = simulate(config, lambda i: DACPolicy(DACConfig(ceiling_s=deadline), seed=i))
            print(f"model N= 1024 after, max_commit_delay_s = ceiling_s = {deadline:.0f} s, max_pending 2048, "
                  f"{rebase}: conflicts {100 * result['conflict_rate']:5.1f}%", flush=True)
        rows.append(row)
    return rows


def registration_model_rows(ns: list[int]) -> list[dict[str, Any]]:
    rows = []
    for n in ns:
        for variant, (_, backoff) in VARIANTS.items():
            row: dict[str, Any] = {"n": n, "variant": variant}
            for rebase in ("per_version", "constant"):
                row[rebase] = result = simulate_registration(n, backoff=backoff, rtt_s=RTT, rebase=rebase, seed=n)
                print(f"registration model N={n:5d} {variant:6} {rebase:11}: {result['requests']} requests, "
                      f"{result['attempts_per_producer']:.1f} attempts/producer, {result['seconds']:.1f} s", flush=True)
            rows.append(row)
    return rows


class _DataApart(CountingStore):
    """Counts TGB objects' PUTs apart (``calls['data_put']``): the manifest's requests are the rest."""

    def put(self, key: str, data: bytes | memoryview) -> None:
        if key.startswith("data/"):
            self._count("data_put")
            self.inner.put(key, data)
            return
        super().put(key, data)


def _counting_store() -> tuple[MemoryStore, _DataApart]:
    memory = MemoryStore(f"dac-scale-{uuid.uuid4().hex}")
    return memory, _DataApart(LatencyStore(memory, rtt=RTT, bandwidth=0))


class _Together:
    """``n`` threads: each prepares (``prepare(i)``), all wait for each other, then each runs what it prepared.

    The constructor returns once every thread is prepared; :meth:`join`
    waits for them and raises the first error of any.
    """

    def __init__(self, n: int, prepare: Callable[[int], Callable[[], object]]) -> None:
        self.errors: list[BaseException] = []
        self._barrier = threading.Barrier(n + 1)
        self._threads = [threading.Thread(target=self._body, args=(prepare, i), daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            self.join()

    def _body(self, prepare: Callable[[int], Callable[[], object]], i: int) -> None:
        try:
            work = prepare(i)
            self._barrier.wait()
            work()
        except BaseException as e:  # noqa: BLE001 - raised by join()
            self.errors.append(e)
            self._barrier.abort()

    def join(self, timeout: float | None = None) -> None:
        for t in self._threads:
            t.join(timeout)
        if self.errors:
            raise self.errors[0]


def measured_registration(n: int, backoff: Backoff) -> dict[str, Any]:
    """``n`` real committers calling ``start()`` at once (threads)."""
    memory, store = _counting_store()

    def prepare(i: int) -> Callable[[], object]:
        committer = LogBumpCommitter(Manifest(store), f"p{i:04d}")
        committer.registration_backoff = backoff
        return committer.start

    try:
        together = _Together(n, prepare)
        started = time.perf_counter()
        together.join()
        seconds = time.perf_counter() - started
    finally:
        memory.destroy()
    attempts = store.calls["put_if_absent"]
    return {"requests": store.total, "attempts_per_producer": attempts / n, "seconds": seconds}


def measured_commits(
    n: int, policy: Callable[[int], CommitPolicy], *, tgb_interval_s: float, warmup_s: float, window_s: float
) -> dict[str, Any]:
    """``n`` real producers (threads), started together, each appending a TGB every ``tgb_interval_s``."""
    memory, store = _counting_store()
    layout = Layout()
    stop = threading.Event()
    producers: list[Producer] = []

    def prepare(i: int) -> Callable[[], None]:
        p = Producer(store, producer_id=f"p{i:04d}", layout=layout, commit_policy=policy(i))
        producers.append(p)
        batch = {"x": torch.zeros((1, 16), dtype=torch.uint8)}

        def work() -> None:
            next_at = time.monotonic()
            while not stop.is_set():
                p.append(batch)
                next_at += tgb_interval_s
                if (delay := next_at - time.monotonic()) > 0:
                    stop.wait(delay)
        return work

    try:
        together = _Together(n, prepare)
        time.sleep(warmup_s)
        store.reset()
        before = [p.stats() for p in producers]
        time.sleep(window_s)
        after = [p.stats() for p in producers]
        calls = dict(store.calls)
        stop.set()
        together.join(60)
    finally:
        stop.set()
        for p in producers:
            p.abort()
        memory.destroy()
    attempts = sum(a.attempts - b.attempts for a, b in zip(after, before))
    conflicts = sum(a.conflicts - b.conflicts for a, b in zip(after, before))
    successes = sum(a.successes - b.successes for a, b in zip(after, before))
    manifest = sum(calls.values()) - calls.get("data_put", 0)
    return {
        "attempts": attempts,
        "conflict_rate": conflicts / attempts if attempts else None,
        "requests_per_commit": manifest / successes if successes else None,
        "commits_per_s": successes / window_s,
        "mean_window_ms": 1e3 * sum(a.fragile_window_s for a in after) / len(after),
    }


def validation_rows(ns: list[int], *, warmup_s: float, window_s: float, tgb_interval_s: float) -> list[dict[str, Any]]:
    rows = []
    for n in ns:
        for variant, (policy, _) in VARIANTS.items():
            config = DACConfig(max_gap_s=1.0, jitter=0.2 if variant == "before" else DACConfig().jitter)
            make = (lambda i, c=config, p=policy: p(c, i))  # noqa: E731
            measured = measured_commits(n, make, tgb_interval_s=tgb_interval_s, warmup_s=warmup_s, window_s=window_s)
            modelled = simulate(ModelConfig(producers=n, warmup_s=warmup_s, window_s=window_s,
                                            tgb_interval_s=tgb_interval_s, rtt_s=RTT), make)
            rows.append({"n": n, "variant": variant, "measured": measured, "model": modelled})
            print(f"validation N={n:3d} {variant:6}: conflicts {_pct(measured['conflict_rate'])} measured, "
                  f"{_pct(modelled['conflict_rate'])} model; requests/commit {measured['requests_per_commit']:.1f} "
                  f"vs {modelled['requests_per_commit']:.1f}; W {measured['mean_window_ms']:.0f} vs "
                  f"{modelled['mean_window_ms']:.0f} ms; {measured['attempts']} vs {modelled['attempts']} attempts",
                  flush=True)
    return rows


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 8 and 64 only, short runs")
    parser.add_argument("--skip-measured", action="store_true", help="the model only (no real producers)")
    parser.add_argument("--tgb-interval", type=float, default=1.0, help="seconds between one producer's TGBs (model)")
    add_results_arg(parser)
    args = parser.parse_args(argv)
    ns = [8, 64] if args.quick else [8, 64, 256, 1024]
    payload: dict[str, Any] = {
        "model": "discrete-event model (benchmarks/_commit_model.py), every request one round trip of "
                 f"{RTT * 1e3:g} ms; measured: threads of one process on a LatencyStore (same rtt) over a MemoryStore",
        "tgb_interval_s": args.tgb_interval,
        "commits": model_rows(ns, tgb_interval_s=args.tgb_interval, min_attempts=800 if args.quick else 4000),
        "registration": registration_model_rows(ns),
    }
    if not args.skip_measured:
        for row in payload["registration"]:
            if row["n"] <= 64:
                row["measured"] = result = measured_registration(row["n"], VARIANTS[row["variant"]][1])
                print(f"registration measured N={row['n']:3d} {row['variant']:6}: {result['requests']} requests, "
                      f"{result['attempts_per_producer']:.1f} attempts/producer, {result['seconds']:.1f} s", flush=True)
        window = 6.0 if args.quick else 15.0
        payload["validation"] = validation_rows([8] if args.quick else [8, 64], warmup_s=3.0, window_s=window,
                                                tgb_interval_s=0.5)
        payload["validation_config"] = {"max_gap_s": 1.0, "tgb_interval_s": 0.5, "warmup_s": 3.0, "window_s": window}
    save(results_dir(args), "dac_scale", payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
