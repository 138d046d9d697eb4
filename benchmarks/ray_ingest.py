"""Ray fleet ingest: throughput vs number of Ray actors for a CPU-bound transform, under DAC.

A fleet (``torch_tgb.integrations.ray``) produces ``--shards`` shards of a
synthetic pipeline into a fresh local namespace with 1, 2 and 4 actors. Each
global batch costs a fixed amount of CPU in the actor (``--work`` rounds of
sorting a 64 Ki-element array, standing in for tokenisation or decoding) and is
``GLOBAL_BATCH x SEQ_LEN`` int32 tokens. Reported per actor count: steps/s and
MB/s over the fleet's wall time (actor start included, and over the steady
part: from the first to the last commit seen by the driver), commit success
rate (DAC), and visibility lag (seconds from a TGB's write to the commit that
made it visible, mean and max). Results JSON (with the machine, its core count
and load) goes to ``--results-dir``.

    python benchmarks/ray_ingest.py --quick      # ~2 min on 2 busy cores
    python benchmarks/ray_ingest.py              # the full run

On a machine with C cores, more than C actors cannot add throughput to a
CPU-bound transform; the 4-actor point on a 2-core machine shows the cost of
oversubscription, not scaling.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save  # noqa: E402
SEQ_LEN = 512
GLOBAL_BATCH = 16


class CpuBoundBatches(BaseNode[dict[str, torch.Tensor]]):
    """``steps`` global batches of shard ``shard``; each costs ``work`` rounds of sorting 64 Ki floats."""

    def __init__(self, shard: int, steps: int, work: int) -> None:
        super().__init__()
        self.shard, self.steps, self.work = shard, steps, work
        self._next = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._next = 0 if initial_state is None else int(initial_state["next"])

    def next(self) -> dict[str, torch.Tensor]:
        if self._next >= self.steps:
            raise StopIteration
        rng = np.random.default_rng([self.shard, self._next])
        values = rng.random(1 << 16)
        for _ in range(self.work):  # the CPU-bound transform
            values = np.sort(values * 1.000001 + 0.5) % 1.0
        tokens = rng.integers(0, 50_000, size=(GLOBAL_BATCH, SEQ_LEN + 1), dtype=np.int32)
        self._next += 1
        t = torch.from_numpy(tokens)
        return {"input_ids": t[:, :-1].contiguous(), "labels": t[:, 1:].contiguous()}

    def get_state(self) -> dict[str, Any]:
        return {"next": self._next}


def factory(steps: int, work: int):
    def make_pipeline(shard_index: int, shard_count: int) -> CpuBoundBatches:
        return CpuBoundBatches(shard_index, steps, work)

    return make_pipeline


def run_point(actors: int, *, shards: int, steps: int, work: int, root: Path) -> dict[str, Any]:
    import torch_tgb as tgb
    from torch_tgb.integrations.ray import Fleet, FleetConfig

    ns = str(root / f"ns-{actors}")
    fleet = Fleet(ns, factory(steps, work), num_producers=actors, num_shards=shards,
                  layout=tgb.Layout(dp=2, seq_keys=("input_ids", "labels")), progress=False,
                  fleet=FleetConfig(poll_interval_s=0.1))
    started = time.monotonic()
    fleet.start()
    first = None
    while fleet.running:
        if first is None and sum(s.committed for s in fleet.stats()) > 0:
            first = time.monotonic()
        time.sleep(0.05)
    report = fleet.wait()
    wall = time.monotonic() - started
    steady = wall - ((first or started) - started)
    return {
        "actors": actors,
        "steps": report.steps,
        "seconds": round(wall, 3),
        "steps_per_s": report.steps / wall,
        "mb_per_s": report.bytes / 1e6 / wall,
        "steady_seconds": round(steady, 3),
        "steady_steps_per_s": report.steps / steady if steady > 0 else None,
        "commit_success_rate": report.commit_success_rate,
        "commit_attempts": sum(p.commit_attempts for p in report.producers),
        "visibility_lag_mean_s": report.visibility_lag_s,
        "visibility_lag_max_s": max(p.visibility_lag_max_s for p in report.producers),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="6 steps per shard instead of 40")
    p.add_argument("--actors", default="1,2,4")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--steps-per-shard", type=int, default=None)
    p.add_argument("--work", type=int, default=8, help="sort rounds per global batch (the CPU-bound transform)")
    add_results_arg(p)
    args = p.parse_args(argv)
    steps = args.steps_per_shard or (6 if args.quick else 40)

    import ray

    ray.init(address="local", num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    points = []
    try:
        with tempfile.TemporaryDirectory(prefix="tgb-ray-ingest-") as tmp:
            # one untimed warm-up fleet: the first actors of a session pay for Ray's worker pool
            run_point(1, shards=1, steps=1, work=1, root=Path(tmp) / "warmup")
            for actors in [int(a) for a in args.actors.split(",")]:
                point = run_point(actors, shards=args.shards, steps=steps, work=args.work, root=Path(tmp))
                points.append(point)
                print(f"{actors} actor(s): {point['steps_per_s']:.2f} steps/s ({point['mb_per_s']:.2f} MB/s) over "
                      f"{point['seconds']:.1f} s, steady {point['steady_steps_per_s'] or 0:.2f} steps/s, commit "
                      f"success {point['commit_success_rate']:.0%}, visibility lag {point['visibility_lag_mean_s']:.3f} s "
                      f"mean / {point['visibility_lag_max_s']:.3f} s max", flush=True)
    finally:
        ray.shutdown()
    report = {
        "quick": bool(args.quick),
        "shards": args.shards,
        "steps_per_shard": steps,
        "work_rounds": args.work,
        "seq_len": SEQ_LEN,
        "global_batch": GLOBAL_BATCH,
        "commit_policy": "dac",
        "points": points,
    }
    save(results_dir(args), "ray_ingest_quick" if args.quick else "ray_ingest", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
