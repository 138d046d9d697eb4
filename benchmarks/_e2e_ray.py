"""(c) of ``end_to_end.py``: its producers as a Ray fleet, and the kill of one actor mid-run.

The fleet (``torch_tgb.integrations.ray.Fleet``) runs ``workers`` shards on
``workers`` actors of ``num_cpus=1``; shard ``i`` is the transform of offsets
``i, i + workers, ...``, as the producer processes of (b) deal them. The
trainer reads the namespace with ``tgb.DataLoader`` as in (b). Nothing here
imports ``end_to_end`` (a script): it passes the transform and the training
loop in; this module's classes travel to the actors by value.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torchdata.nodes import BaseNode

import torch_tgb as tgb

Transform = Callable[[int], dict[str, torch.Tensor]]


class OffsetShard(BaseNode[dict[str, torch.Tensor]]):
    """Shard ``shard`` of ``count``: the transform of offsets shard, shard + count, ... below ``steps``."""

    def __init__(self, transform: Transform, shard: int, count: int, steps: int) -> None:
        super().__init__()
        self.transform, self.shard, self.count, self.steps = transform, shard, count, steps
        self._next = shard

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        torch.set_num_threads(1)  # runs in the actor: one data process = one core, as in (a) and (b)
        self._next = self.shard if initial_state is None else int(initial_state["next"])

    def next(self) -> dict[str, torch.Tensor]:
        if self._next >= self.steps:
            raise StopIteration
        out = self.transform(self._next)
        self._next += self.count
        return out

    def get_state(self) -> dict[str, Any]:
        return {"next": self._next}


class FleetPipelines:
    """``make_pipeline(shard, count)`` for the fleet; ``make_transform()`` builds a transform in the actor."""

    def __init__(self, make_transform: Callable[[], Transform], steps: int) -> None:
        self.make_transform, self.steps = make_transform, steps

    def __call__(self, shard: int, count: int) -> OffsetShard:
        return OffsetShard(self.make_transform(), shard, count, self.steps)


def ray_fleet(ns: str, *, make_transform: Callable[[], Transform], steps: int, workers: int,
              train: Callable[..., dict[str, Any]], crash_at: int | None) -> dict[str, Any]:
    """Produce ``steps`` offsets into ``ns`` on a fleet while ``train`` reads them; ``run["outage"]`` the kill's."""
    import ray

    from torch_tgb.integrations.ray import Fleet, FleetConfig

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors cannot import benchmarks/
    fleet = Fleet(ns, FleetPipelines(make_transform, steps), num_producers=workers, layout=tgb.Layout(dp=1),
                  commit_policy="fixed:2", actor_options={"num_cpus": 1}, max_restarts=3, progress=False,
                  fleet=FleetConfig(poll_interval_s=0.1))
    outage: dict[str, Any] = {"step_now": 0}

    def on_step(step: int) -> None:
        outage["step_now"] = step
        if step == crash_at:
            _kill_one_actor(fleet, outage)

    fleet.start()
    loader = tgb.DataLoader(ns, mesh=tgb.Mesh(dp_rank=0, dp_size=1), num_workers=0, timeout=120)
    try:
        run = train(loader, steps, on_step=on_step)
    finally:
        try:
            report = fleet.wait(timeout=120)
            outage.update(worker_deaths=report.worker_deaths, fleet_steps=report.steps,
                          commit_success_rate=report.commit_success_rate)
        except Exception as exc:  # noqa: BLE001 - a fleet that fails is reported beside the trainer's result
            fleet.stop()
            outage["fleet_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    outage.pop("step_now")
    run["outage"] = outage
    return run


def _kill_one_actor(fleet: Any, outage: dict[str, Any], timeout: float = 120) -> None:
    """``ray.kill`` an actor running a shard (Ray restarts it); a thread then waits for a new attempt to commit.

    The fleet's per-shard stats are the driver's (polled every 0.1 s): resumed = one more attempt than at the
    kill and more successful commits. Steps are the trainer's (``outage["step_now"]``).
    """
    import ray

    running = fleet.actors(running=True)
    if not running:  # every shard already done (the producers outpaced the trainer): said, not faked
        outage["not_killed"] = "no actor was running a shard: every shard was done"
        return

    def totals() -> tuple[int, int]:
        stats = fleet.stats()
        return sum(s.attempts for s in stats), sum(s.commit_successes for s in stats)

    attempts, commits = totals()
    killed_t = time.perf_counter()
    ray.kill(running[0], no_restart=False)
    outage["killed_at_step"] = outage["step_now"]

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and fleet.running:
            now_attempts, now_commits = totals()
            if now_attempts > attempts and now_commits > commits:
                outage.update(resumed_at_step=outage["step_now"], resumed_after_s=time.perf_counter() - killed_t)
                return
            time.sleep(0.02)
        outage["resumed_after_s"] = None  # the fleet ended (or timed out) before a new attempt committed

    threading.Thread(target=watch, daemon=True).start()
