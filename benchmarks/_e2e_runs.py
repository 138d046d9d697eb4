"""One run of ``end_to_end.py``: a trainer on its node fed by (a) its own DataLoader workers, (b) producer
processes or (c) a Ray fleet on the producer node; its summary.

``Runner.run(setup, resolution, steps)`` forks the trainer (``_e2e_roles``)
on the setup's trainer cores and the producers on theirs (``_e2e_proc``),
waits until all are built and says ``GO`` to all. (b)'s producer ``i`` of
``n`` is shard ``i`` of a job of ``n`` declared shards, so the namespace is
sealed when every shard is done. A crash run (``hold_at``)
stops producer 0 (or the fleet's actor of shard 0) at that batch
(``_e2e_roles.hold_for_kill``): (b) the orchestrator SIGKILLs it there and
starts a replacement with the same producer id ``outage`` seconds later; (c)
the fleet driver ``ray.kill``s the actor and Ray restarts it. (a) kills its
own worker at trainer step ``kill_at``. Every run's trainer takes the first
``steps`` tar shards (one global batch each), so what it delivered is checked
against exactly those samples; (a)'s workers are given ``PREFETCH`` more
shards each, which the trainer never takes, so that they are still working
when it ends.
"""

from __future__ import annotations

import json
import shutil
import signal
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _e2e_cpu as cpu
import _e2e_images as img
from _common import pct
import _e2e_roles
from _e2e_proc import Proc
from _e2e_roles import read_hold


#: batches each colocated DataLoader worker makes ahead (``prefetch_factor``)
PREFETCH = 4


def run_role(role: str, cfg: dict[str, Any]) -> None:
    """What a forked child (``_e2e_proc.Proc``) or ``end_to_end.py --role`` runs: one role of ``_e2e_roles``, or
    the Ray fleet's driver (``_e2e_ray.fleet``, imported only then)."""
    if role == "fleet":
        import _e2e_ray

        _e2e_ray.fleet(cfg)
    else:
        _e2e_roles.ROLES[role](cfg)


@dataclass(frozen=True)
class Setup:
    """``kind``: "colocated" | "processes" | "fleet"; ``shared``: trainer and data both on T ∪ P;
    ``read_ahead``: the trainer's tgb.DataLoader reads on a thread of its own (``inline_local=False``);
    ``codecs``: the producers store the patches compressed (``_e2e_images.CODECS``), the trainer decodes them."""

    name: str
    kind: str
    workers: int = 0
    shared: bool = False
    read_ahead: bool = False
    codecs: bool = False

    def describe(self, t: list[int], p: list[int]) -> str:
        both = sorted(t + p)
        if self.kind == "colocated":
            where = both if self.shared else t
            return f"trainer + {self.workers} DataLoader worker(s) on cores {where}"
        data = both if self.shared else p
        what = "tgb.produce process(es)" if self.kind == "processes" else "a Ray fleet (driver, GCS, raylet, actors)"
        reads = ", reading ahead on a thread" if self.read_ahead else ""
        if self.codecs:
            what += " storing pixel_values compressed (zstd:1 + delta), which the trainer's read-ahead decodes"
        return f"trainer on cores {both if self.shared else t}{reads}; {what} on cores {data}"


SETUPS = {s.name: s for s in (
    Setup("a0", "colocated", 0), Setup("a1", "colocated", 1), Setup("a2", "colocated", 2),
    Setup("b", "processes"), Setup("b_zstd", "processes", codecs=True), Setup("c", "fleet"),
    Setup("b_ahead", "processes", read_ahead=True),
    Setup("a1_shared", "colocated", 1, shared=True), Setup("a2_shared", "colocated", 2, shared=True),
    Setup("b_shared", "processes", shared=True),
)}


class Runner:
    """Starts the processes of one run on their cores; see the module docstring."""

    def __init__(self, work: Path, *, t: list[int], p: list[int], data: dict[str, Any], batch: int, warmup: int,
                 model: dict[str, Any], outage: float, timeout: float, quiet: float | None = None,
                 gate_budget_s: float = 0.0, device: str = "cpu") -> None:
        self.work, self.t, self.p, self.data, self.device = work, t, p, data, device
        self.batch, self.warmup, self.model, self.outage, self.timeout = batch, warmup, model, outage, timeout
        # before each run, wait until other jobs use at most ``quiet`` cores (None: never), for at most
        # ``gate_budget_s`` seconds over the whole benchmark (runs run again count too); once it is spent,
        # runs start at once and the results say they were disturbed
        self.quiet, self.gate_budget_s = quiet, gate_budget_s
        self.gate_spent_s = 0.0
        self._n = 0

    def _path(self, stem: str) -> Path:
        self._n += 1
        return self.work / f"{stem}-{self._n:04d}"

    def start(self, role: str, cfg: dict[str, Any], cores: list[int], *, session: bool = False) -> Proc:
        self._path(f"cfg-{role}").with_suffix(".json").write_text(json.dumps(cfg))  # for a rerun by hand
        return Proc(run_role, role, cfg, cores, session=session)

    def base(self, resolution: Any, seq: int, steps: int) -> dict[str, Any]:
        return {"urls": self.data["urls"][:steps], "resolution": resolution, "batch": self.batch, "seq": seq}

    @property
    def gate_left_s(self) -> float:
        return max(0.0, self.gate_budget_s - self.gate_spent_s)

    def charge(self, seconds: float) -> None:
        """Time lost to other jobs outside the gate (a run run again) comes out of its budget."""
        self.gate_spent_s += seconds

    def gate(self) -> dict[str, Any] | None:
        """Wait for a quiet machine (30 s at most per run, and only while the budget lasts)."""
        if self.quiet is None:
            return None
        g = cpu.wait_quiet(max_cores=self.quiet, window=0.5, timeout=min(30.0, self.gate_left_s))
        self.gate_spent_s += g["waited_s"]
        return {**g, "quiet": g["busy_cores"] <= self.quiet, "budget_left_s": self.gate_left_s}

    # --- calibration: D on P alone, then S and S + R on T alone ----------------------------------------

    def calibrate(self, resolution: int, seq: int, steps: int, *, coded_first: bool = False) -> dict[str, Any]:
        """S, S + R and D of the plain namespace; S + R and D of the same batches stored compressed (``_zstd``):
        the trainer's read of each on T, in the order ``coded_first`` says (rounds alternate it)."""
        self.gate()
        made: dict[bool, tuple[dict[str, Any], dict[str, Any]]] = {}
        for coded in (coded_first, not coded_first):
            ns = self._path("ns-cal")
            prod = self._path("producer").with_suffix(".json")
            cfg = {**self.base(resolution, seq, steps), "ns": str(ns), "shard": [0, 1], "out": str(prod),
                   "codecs": img.CODECS if coded else None}
            if self.start("producer", cfg, self.p).wait(timeout=self.timeout) != 0:
                raise RuntimeError(f"calibration producer failed at resolution {resolution}")
            at_rest = sum(f.stat().st_size for f in (ns / "data").rglob("*") if f.is_file())
            out = self._path("calibrate").with_suffix(".json")
            cal = {"ns": str(ns), "model": self.model, "out": str(out), "device": self.device}
            if self.start("calibrate", cal, self.t).wait(timeout=self.timeout) != 0:
                raise RuntimeError(f"calibration trainer failed at resolution {resolution}")
            shutil.rmtree(ns, ignore_errors=True)
            made[coded] = json.loads(prod.read_text()), {**json.loads(out.read_text()), "at_rest": at_rest / steps}
        (d, s), (dz, sz) = made[False], made[True]
        # S + R >= S by construction: a step in memory costing more than one fed by the loader was disturbed
        # (another job on T, seen as S up to 1.5x S + R on this shared machine), so S is the smaller of the two
        return {"S_s": min(s["S_s"], s["S_read_s"]), "S_memory_s": s["S_s"], "S_read_s": s["S_read_s"],
                "D_s": d["cpu_s_per_step"],
                "D_pipeline_s": d["pipeline_s_per_step"],
                "bytes_per_step": s["bytes_per_step"], "steps": steps,
                # the same batches stored compressed: the trainer's step fed by its reader (CPU of the process,
                # decoding included; and wall), the producer's CPU per step (encoding included), bytes at rest
                "S_read_wall_s": s["S_read_wall_s"], "S_read_zstd_s": sz["S_read_s"],
                "S_read_zstd_wall_s": sz["S_read_wall_s"], "D_zstd_s": dz["cpu_s_per_step"],
                "at_rest_bytes_per_step": s["at_rest"], "at_rest_zstd_bytes_per_step": sz["at_rest"],
                "coded_first": coded_first}

    # --- one run ---------------------------------------------------------------------------------------

    def run(self, setup: Setup, resolution: Any, seq: int, steps: int, *, kill_at: int | None = None,
            hold_at: int | None = None, check_every: int | None = None, profile: bool = False) -> dict[str, Any]:
        both = sorted(self.t + self.p)
        t_cores = both if setup.shared else self.t
        p_cores = both if setup.shared else self.p
        ns = self._path("ns")
        out = self._path("trainer").with_suffix(".json")
        base = self.base(resolution, seq, steps)
        if setup.kind == "colocated":  # workers never run dry within the run: they prefetch PREFETCH batches each,
            # and a run whose last batches were made in advance would take its last steps at 1/S
            base["urls"] = self.data["urls"][:steps + PREFETCH * setup.workers]
        cfg = {**base, "setup": "colocated" if setup.kind == "colocated" else "tgb", "prefetch": PREFETCH,
               "workers": setup.workers, "ns": str(ns), "steps": steps, "warmup": self.warmup, "model": self.model,
               "out": str(out), "trainer_cpus": t_cores, "kill_at": kill_at, "check_every": check_every,
               "timeout": self.timeout, "profile": profile, "device": self.device, "read_ahead": setup.read_ahead,
               "codecs": img.CODECS if setup.codecs else None}
        if hold_at is not None:
            cfg["hold"] = {"at": hold_at, "file": str(self._path("hold").with_suffix(".json")), "max_s": 60}
        gate = self.gate()
        load_before = cpu.loadavg()
        ours0, busy0, wall0 = cpu.ours_s(), cpu.core_busy_s(), time.monotonic()
        trainer = self.start("trainer", cfg, t_cores)
        data_procs, reports, events = self._start_data(setup, cfg, p_cores)
        # all are forked and build what they need side by side; none reads data before GO
        if not all(proc.await_ready(self.timeout) for proc in [trainer, *data_procs]):
            for proc in [trainer, *data_procs]:
                proc.kill()
            raise RuntimeError(f"{setup.name}: a process of the run did not start")
        for proc in [*data_procs, trainer]:
            proc.go()
        events["go_t"] = time.monotonic()
        watcher = threading.Thread(target=self._relay, args=(trainer, setup, cfg, p_cores, data_procs, reports,
                                                            events), daemon=True)
        watcher.start()
        self._watch(trainer, data_procs, events)
        watcher.join(timeout=self.outage + 30)
        for proc in list(data_procs):
            if proc.wait(timeout=self.timeout) is None:  # never finished: killed (a fleet driver with its Ray)
                events["killed_after_timeout"] = proc.role
                proc.kill()
        busy = sum(cpu.core_busy_s().values()) - sum(busy0.values())
        foreign = max(0.0, busy - (cpu.ours_s() - ours0)) / (time.monotonic() - wall0)
        result = json.loads(out.read_text()) if out.exists() else {"error": "no trainer result", "end": []}
        result["foreign_cores"], result["quiet_gate"] = foreign, gate
        result["producers"] = [json.loads(r.read_text()) for r in reports if r.exists()]
        result["producers"] += [json.loads(r.read_text()) for r in sorted(Path(cfg["reports"]).glob("*.json"))] \
            if "reports" in cfg else []
        result["events"] = events
        result["load_before"], result["load_after"] = load_before, cpu.loadavg()
        shutil.rmtree(ns, ignore_errors=True)
        return result

    def _watch(self, trainer: Proc, procs: list[Proc], events: dict[str, Any]) -> None:
        """Wait for the trainer; stop it if a data process fails first (it would wait for data until its timeout)."""
        deadline = time.monotonic() + self.timeout
        while trainer.wait(0.05) is None:
            failed = [p.poll() for p in procs[:1] if p.poll() not in (None, 0, -signal.SIGKILL)]
            if failed or time.monotonic() > deadline:
                events["stopped"] = f"data process exited with {failed[0]}" if failed else "timeout"
                trainer.kill()
                break

    def _producer_cfg(self, cfg: dict[str, Any], index: int, count: int) -> dict[str, Any]:
        out = {**{k: cfg[k] for k in ("urls", "resolution", "batch", "seq", "ns", "codecs")},
               "shard": [index, count], "out": str(self._path(f"producer-p{index}").with_suffix(".json"))}
        if index == 0 and "hold" in cfg:
            out["hold"] = cfg["hold"]
        return out

    def _start_data(self, setup: Setup, cfg: dict[str, Any], cores: list[int]
                    ) -> tuple[list[Proc], list[Path], dict[str, Any]]:
        procs: list[Proc] = []
        reports: list[Path] = []
        if setup.kind == "processes":  # one producer per core of P (also when it may run on T ∪ P)
            for i in range(len(self.p)):
                pc = {**self._producer_cfg(cfg, i, len(self.p)), "go": True}
                reports.append(Path(pc["out"]))
                procs.append(self.start("producer", pc, cores))
        elif setup.kind == "fleet":
            fleet_out = self._path("fleet").with_suffix(".json")
            cfg["reports"] = str(self._path("fleet-reports"))
            Path(cfg["reports"]).mkdir()
            fc = {**{k: cfg[k] for k in ("urls", "resolution", "batch", "seq", "ns")}, "producers": len(self.p),
                  "shards": len(self.p), "out": str(fleet_out), "reports": cfg["reports"], "hold": cfg.get("hold")}
            reports.append(fleet_out)
            procs.append(self.start("fleet", fc, cores, session=True))
        return procs, reports, {}

    def _relay(self, trainer: Proc, setup: Setup, cfg: dict[str, Any], cores: list[int], procs: list[Proc],
               reports: list[Path], events: dict[str, Any]) -> None:
        """(b) in a crash run: once producer 0 holds at its kill point, SIGKILL it and start its replacement."""
        hold = cfg.get("hold")
        if setup.kind != "processes" or hold is None:
            return
        while trainer.poll() is None:
            held = read_hold(hold["file"])
            if held is None:
                if procs[0].poll() is not None:  # it ended without reaching the kill point
                    events["producer_running_at_kill"] = False
                    return
                time.sleep(0.005)
                continue
            events["held_t"] = held["t"]
            events["producer_running_at_kill"] = procs[0].poll() is None and held["pid"] == procs[0].pid
            procs[0].signal(signal.SIGKILL)
            events["killed_t"] = time.monotonic()
            time.sleep(self.outage)
            pc = self._producer_cfg(cfg, 0, len(self.p))
            reports.append(Path(pc["out"]))
            procs.append(self.start("producer", pc, cores))
            events["restarted_t"] = time.monotonic()
            return


def summarise(run: dict[str, Any], warmup: int) -> dict[str, Any]:
    """Steady-state figures of a trainer's run (steps ``warmup`` .. end)."""
    ends, n = run.get("end", []), len(run.get("end", []))
    out: dict[str, Any] = {"steps": n, "error": run.get("error")}
    if n <= warmup + 1:
        return {**out, "steps_per_s": 0.0}
    times = [b - a for a, b in zip(ends[warmup - 1:], ends[warmup:])]
    measured = n - warmup
    wait = run["wait"][warmup:]
    window = run.get("window_cpu") or {}
    producers = [p for p in run.get("producers", []) if p.get("cpu_s_per_step")]
    out.update(
        steps_per_s=measured / (ends[-1] - ends[warmup - 1]),
        step_p50_ms=pct(times, 50) * 1e3, step_p95_ms=pct(times, 95) * 1e3,
        wait_ms_per_step=statistics.fmean(wait) * 1e3, wait_fraction=sum(wait) / sum(times),
        compute_ms_per_step=statistics.fmean(run["compute"][warmup:]) * 1e3,
        compute_cpu_ms_per_step=statistics.fmean(run["compute_cpu"][warmup:]) * 1e3,
        cpu_T_s_per_step=window.get("processes_s", float("nan")) / measured,
        cores_T_busy_s_per_step=window.get("cores_busy_s", float("nan")) / measured,
        # T's CPU per step besides the model's step: reading (a compressed namespace's decoding) and bookkeeping
        reader_cpu_ms_per_step=window.get("processes_s", float("nan")) / measured * 1e3
        - statistics.fmean(run["compute_cpu"][warmup:]) * 1e3,
        bytes_per_step=statistics.fmean(run["bytes"][warmup:]),
        first_step_s=ends[0] - run["started"],
        D_run_s=statistics.fmean(p["cpu_s_per_step"] for p in producers) if producers else None,
        load_before=run.get("load_before"), load_after=run.get("load_after"),
        foreign_cores=run.get("foreign_cores"), quiet_gate=run.get("quiet_gate"),
    )
    return out
