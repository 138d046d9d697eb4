"""Autoscaling fleet (issue 46): the producers' cost doubles mid-run; how long until the trainer stops waiting?

A local Ray fleet with ``FleetConfig(autoscale=(1, MAX))`` produces a
synthetic corpus (tiny TGBs: the cost is the model's, not the bytes'). Each
batch costs ``--cost-s`` seconds of the producer's time (a sleep: a stand-in
for decoding, tokenising, resizing) until ``--switch-s`` seconds into the run,
then twice that (a resolution schedule step; here a flag file, so that it
lands on a settled fleet whatever shard each actor is on: it changes the
cost, never the data). A trainer in this
process reads the namespace at ``--step-s`` seconds of compute a step,
measures the share of each second it spends waiting for data (its stall), and
reports step and stall with ``ControlChannel.report_trainer`` every second.

Reported: the timeline (seconds, live actors, the target, the producers'
lead over the trainer, the trainer's stall), the time from the first
doubled-cost batch until the stall stays under 5% (``--settle`` windows in a
row), scale-up decisions while paused by ``max_lag`` (none by construction
of the policy; counted), and whether every document was read exactly once.

Usage: python benchmarks/autoscale.py [--quick] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torchdata.nodes import BaseNode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_results_arg, results_dir  # noqa: E402

import torch_tgb as tgb  # noqa: E402

ROWS, SEQ = 4, 8


class CostlyRows(BaseNode[dict[str, torch.Tensor]]):
    """Batches ``0..n-1`` of shard ``shard``: row ids encode (shard, batch, row); each batch sleeps its cost."""

    def __init__(self, shard: int, n: int, cost_s: float, flag: str) -> None:
        super().__init__()
        self.shard, self.n, self.cost_s, self.flag = shard, n, cost_s, flag
        self._pos = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._pos = 0 if initial_state is None else int(initial_state["pos"])

    def next(self) -> dict[str, torch.Tensor]:
        if self._pos >= self.n:
            raise StopIteration
        time.sleep(self.cost_s * (2 if os.path.exists(self.flag) else 1))
        base = (self.shard * self.n + self._pos) * ROWS
        ids = torch.arange(base, base + ROWS, dtype=torch.int32)[:, None] + torch.zeros(SEQ, dtype=torch.int32)
        self._pos += 1
        return {"input_ids": ids + 1}

    def get_state(self) -> dict[str, Any]:
        return {"pos": self._pos}


def trainer(ns: str, step_s: float, total: int, out: list[dict[str, float]], origin: float) -> set[int]:
    """Read every step at ``step_s`` a step; report (step, stall) each second; return the row ids seen."""
    channel = tgb.ControlChannel(ns)
    seen: list[int] = []
    batches = iter(tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), timeout=600))
    window = time.perf_counter()
    waited, step = 0.0, 0
    while step < total:
        t0 = time.perf_counter()
        batch = next(batches)
        waited += time.perf_counter() - t0
        seen.extend(int(r) - 1 for r in batch["input_ids"][:, 0].tolist())
        time.sleep(step_s)
        step += 1
        now = time.perf_counter()
        if now - window >= 1.0:
            stall = min(1.0, waited / (now - window))
            channel.report_trainer(step=step, stall=stall)
            out.append({"t": now - origin, "step": step, "stall": stall})
            waited, window = 0.0, now
    return set(seen) if len(seen) == len(set(seen)) else set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cost-s", type=float, default=0.1)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--max-actors", type=int, default=8)
    parser.add_argument("--settle", type=int, default=5)
    parser.add_argument("--switch-s", type=float, default=None, help="when the cost doubles (default: 40%% of the run)")
    add_results_arg(parser)
    args = parser.parse_args()
    import ray

    from torch_tgb.integrations.ray import AutoscalePolicy, Fleet, FleetConfig

    shards, per_shard = 16, (40 if args.quick else 120)
    total = shards * per_shard
    switch_s = args.switch_s if args.switch_s is not None else 0.4 * total * args.step_s
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    cost_s = args.cost_s

    with tempfile.TemporaryDirectory() as tmp:
        ns, flag = f"{tmp}/ns", f"{tmp}/doubled"

        def make(shard: int, count: int) -> CostlyRows:
            return CostlyRows(shard, per_shard, cost_s, flag)

        policy = AutoscalePolicy(1, args.max_actors, lead_low=4, lead_high=32, down_cooldown_s=10)
        fleet = Fleet(ns, make, num_producers=1, num_shards=shards, layout=tgb.Layout(dp=1), seal=True,
                      progress=False, actor_options={"num_cpus": 0},
                      fleet=FleetConfig(poll_interval_s=0.2, autoscale=policy, autoscale_interval_s=1.0))
        started = time.perf_counter()  # the origin of the trainer's windows and of the switch
        threading.Timer(switch_s, lambda: open(flag, "w").close()).start()
        fleet.start()
        while not Path(ns, "_tgb").exists():
            time.sleep(0.05)
        windows: list[dict[str, float]] = []
        seen = trainer(ns, args.step_s, total, windows, started)
        report = fleet.wait(timeout=600)
        elapsed = time.perf_counter() - started
    ray.shutdown()
    doubled = switch_s
    after = [w for w in windows if w["t"] >= doubled]
    peak = max((w["stall"] for w in after), default=0.0)
    settled = None  # the first window after the worst one from which --settle windows in a row stay under 5%
    worst = max(range(len(after)), key=lambda i: after[i]["stall"], default=0)
    if peak < 0.05:
        settled = doubled  # the trainer never waited more than 5%: nothing to recover from
    for i in range(worst, len(after) - args.settle + 1):
        if settled is None and all(w["stall"] < 0.05 for w in after[i : i + args.settle]):
            settled = after[i]["t"]
    result = {
        "params": {"cost_s": cost_s, "step_s": args.step_s, "shards": shards, "per_shard": per_shard,
                   "switch_s": switch_s, "max_actors": args.max_actors, "policy": policy.__dict__},
        "peak_stall_after_doubling": peak,
        "elapsed_s": elapsed,
        "doubled_at_s": doubled,
        "stall_under_5pct_at_s": settled,
        "recovery_s": None if doubled is None or settled is None else settled - doubled,
        "scale_ups_while_paused": sum(1 for e in report.autoscale if e.after > e.before and e.paused),
        "exactly_once": seen == set(range(total * ROWS)),
        "events": [e.__dict__ for e in report.autoscale],
        "timeline": [p.__dict__ for p in report.timeline],
        "trainer": windows,
    }
    out = results_dir(args) / "autoscale.json"
    out.write_text(json.dumps(result, indent=1))
    print(report.summary())
    print(report.scaling())
    print(f"cost doubled at {doubled:.1f} s; peak stall after {peak:.0%}; stall < 5% again from {settled} s; "
          f"recovery {result['recovery_s']} s; "
          f"exactly once: {result['exactly_once']}; written {out}")
    print(chart(report.timeline, windows))


def chart(timeline: Any, windows: list[dict[str, float]], every: float = 4.0) -> str:
    """A text chart: per ``every`` seconds, live actors, lead and the trainer's mean stall."""
    rows = ["|   t (s) | actors | target | lead (steps) | trainer stall |", "|---:|---:|---:|---:|---:|"]
    end = max([p.t for p in timeline] + [w["t"] for w in windows] + [0.0])
    t = 0.0
    while t <= end:
        points = [p for p in timeline if t <= p.t < t + every]
        stalls = [w["stall"] for w in windows if t <= w["t"] < t + every]
        if points:
            p = points[-1]
            stall = f"{sum(stalls) / len(stalls):.0%} " + "#" * round(20 * sum(stalls) / len(stalls)) if stalls else ""
            rows.append(f"| {t:7.0f} | {p.actors} {'*' * p.actors} | {p.target} | {p.lead} | {stall} |")
        t += every
    return "\n".join(rows)


if __name__ == "__main__":
    main()
