"""(c) of ``end_to_end.py``: the producers as a Ray fleet whose whole Ray cluster runs on the producer node.

The fleet driver is its own process, started on P's cores; ``ray.init(num_cpus=|P|)``
there starts the local cluster (GCS, raylet, the actors' worker processes) as
its children, which inherit the CPU set: all of Ray runs on P, nothing of it on
T (the trainer only reads the namespace, as in (b)). Shard ``i`` of ``shards``
is the pipeline over WebDataset shard ``(i, shards)`` (``torch_tgb.integrations.ray.Fleet``,
actors of ``num_cpus=1``, ``producers`` of them). In a crash run the actor
of shard 0 stops at batch ``cfg["hold"]["at"]`` (``_e2e_roles.hold_for_kill``)
and the driver ``ray.kill``s it there: Ray restarts it and the fleet hands
the shard back, which resumes at its last commit. The report (worker deaths,
kill and resume times on the monotonic clock) goes to ``cfg["out"]``; each
attempt's CPU seconds per step to ``cfg["reports"]``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import _e2e_images as img
import torch


class FleetPipelines:
    """``make_pipeline(shard, count)`` for the fleet: the pipeline, timed, in the actor (picklable)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg

    def __call__(self, shard: int, count: int) -> Any:
        import _e2e_roles

        report = Path(self.cfg["reports"]) / f"fleet-shard{shard}-pid{os.getpid()}-{time.monotonic_ns()}.json"
        hold = self.cfg.get("hold") if shard == 0 else None
        return _e2e_roles.TimedPipeline(_e2e_roles.build_pipeline(self.cfg, (shard, count)), str(report), hold)


def _totals(fleet: Any) -> tuple[int, int]:
    stats = fleet.stats()
    return sum(s.attempts for s in stats), sum(s.commit_successes for s in stats)


def _kill_one(fleet: Any, out: dict[str, Any], pid: int) -> tuple[int, int] | None:
    """``ray.kill`` the actor whose process ``pid`` holds at the kill point (Ray restarts it); returns the
    (attempts, commits) before it."""
    import ray

    running = fleet.actors(running=True)
    if not running:
        out["not_killed"] = "no actor was running a shard"
        return None
    target = running[0]
    if len(running) > 1:  # several producers: find the one by its process
        from ray.util.state import list_actors

        ids = {a.actor_id: a.pid for a in list_actors(filters=[("state", "=", "ALIVE")], detail=True)}
        target = next((h for h in running if ids.get(h._actor_id.hex()) == pid), target)
    before = _totals(fleet)
    out["killed_t"] = time.monotonic()
    ray.kill(target, no_restart=False)
    return before


def fleet(cfg: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    import ray

    from torch_tgb.integrations.ray import Fleet, FleetConfig

    # a new local cluster (never one found through RAY_ADDRESS or /tmp/ray), started from this process on P
    ray.init(address="local", num_cpus=cfg["producers"], include_dashboard=False, log_to_driver=False,
             object_store_memory=256 * 2**20)
    driver = Fleet(cfg["ns"], FleetPipelines(cfg), num_producers=cfg["producers"], num_shards=cfg["shards"],
                   layout=img.layout(), commit_policy="dac", actor_options={"num_cpus": 1}, max_restarts=3,
                   progress=False, fleet=FleetConfig(poll_interval_s=0.1))
    import _e2e_roles
    from _e2e_proc import ready

    if not ready():  # Ray is up; the actors start (and read) only after GO
        ray.shutdown()
        return
    out: dict[str, Any] = {"started_t": time.monotonic()}
    before = None
    try:
        driver.start()
        while driver.running:
            held = _e2e_roles.read_hold(cfg["hold"]["file"]) if cfg.get("hold") else None
            if held is not None and "held_t" not in out:
                out["held_t"] = held["t"]
                before = _kill_one(driver, out, held["pid"])
            if before is not None and "resumed_t" not in out:
                attempts, commits = _totals(driver)
                if attempts > before[0] and commits > before[1]:
                    out["resumed_t"] = time.monotonic()
            time.sleep(0.02)
        report = driver.wait(timeout=600)
        out.update(worker_deaths=report.worker_deaths, fleet_steps=report.steps,
                   commit_success_rate=report.commit_success_rate)
    except Exception as exc:  # noqa: BLE001 - a fleet that fails is reported beside the trainer's result
        out["fleet_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        driver.stop()
    finally:
        ray.shutdown()
    if cfg.get("hold") and "held_t" not in out:
        out["not_killed"] = "no actor reached the kill point"
    Path(cfg["out"]).write_text(json.dumps(out))
