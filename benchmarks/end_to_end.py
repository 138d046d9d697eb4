"""End to end (seed 000 §7.2 analogue): disaggregated producers vs colocated loading at equal trainer-node CPU, images.

**Nodes.** Cores are split into the trainer's node T (``--trainer-cores``,
default the first core) and a producer node P (the rest); with 2 cores T =
{0}, P = {1}. Every process is pinned (``_e2e_proc``): the trainer and its
DataLoader workers on T; producer processes, and the whole Ray cluster of the
fleet (started by a driver process pinned to P), on P.

**Workload** (``_e2e_images``): a WebDataset of real-size JPEGs (0.5-2 MP, q90)
with 140-150-word captions; producers decode, resize to the training
resolution (a square side), patchify (14 px, 2x2 merge), splice image tokens
and pack one sample per row, ``--batch`` rows per global batch; the trainer
steps a tiny VLM (patch encoder + one-layer GPT, one thread) whose cost grows
with the patches.

**Per resolution and round** (rounds interleaved, setups in rotated order):

- calibration: D, the producer's CPU seconds per step (alone on P), then S,
  the training step's CPU seconds on batches in memory (alone on T), and
  S + R, the same fed by ``tgb.DataLoader``;
- (a) colocated: ``torch.utils.data.DataLoader`` with 0 / 1 / 2 workers
  (``a0``, ``a1``, ``a2``) running the pipeline on T, prefetch 4 (their
  data runs 4 batches per worker past the run's last step, so that a run
  does not end on batches made in advance);
- (b) ``tgb.produce`` processes on P (one per core), trainer on T reading
  with ``tgb.DataLoader``; ``b_zstd`` the same with ``pixel_values`` stored
  compressed (``zstd:1+delta:3x14x14``: the producers encode on P, the
  trainer's reader decodes on T); (c) the same producers as a Ray fleet on P;
- calibration of the compressed read (issue 48): the same batches written
  plain and compressed beforehand, each read by the trainer on T (which goes
  first alternates by round): steps/s compressed / plain, the decoding's CPU
  per step, the producer's CPU per step with encoding, bytes at rest;
- equal total CPU: ``a1_shared`` (``a2_shared`` in ``--quick``), ``b_shared``:
  trainer and data both free to use T ∪ P.

The sweep is ``--resolutions`` plus the resolution where D = S (found from
the first round's calibration; a resolution of the sweep with D/S within
1.25x of 1 counts as it). On a shared machine every run (and calibration)
waits until other jobs use less than 0.1 core (30 s at most per run, 150
s in all: then runs start at once), and a run during which they took
more than 0.05 core is run again once while that budget lasts; the results
count the runs disturbed (``gate``), and each run's other jobs' share
(``foreign_cores``). Reported per run: steps/s, step p50/p95, the wait for
data per step, CPU seconds per step on T (the trainer and its workers, and
the cores' busy time, which also counts strangers), bytes per step; every
run's delivered samples are checked exactly once.

**Also:** a resolution schedule 224 -> 448 mid-run (``transforms.resolution_schedule``)
for the best colocated setup and (b); a crash: SIGKILL of a DataLoader
worker (a) at a third of the trainer's steps, SIGKILL of the producer (b, a
replacement after ``--outage`` s) and ``ray.kill`` of the fleet's actor (c)
at a third of their batches (the producer waits there to be killed, so the
kill falls mid-production whatever the speeds); one more (b) run with the
trainer under ``cProfile`` (where its time goes). The model and the goals
are in ``_e2e_analysis``.

**On a GPU** (``--device cuda``, issue 29's "the real thing"): the trainer's
model (``GPU_MODEL``) steps on the GPU in bf16 autocast, ending each step on
its loss read back; (a) pins its batches and copies them there inside the
wait, (b) reads with ``tgb.DataLoader(device="cuda")``, and ``b_ahead`` the
same with its reads on a thread (``--read-ahead`` adds it on CPU too). S is then the wall
time of a step, so the CPU model of ``_e2e_analysis`` (a step that takes a
core of T) does not describe the run: its figures are the measured steps/s.
Results go to ``end_to_end_gpu.json``. ``--sweep-only`` runs the sweep alone.

Usage: python benchmarks/end_to_end.py [--quick] [--rounds N] [--results-dir DIR]
       [--device cuda] [--trainer-cores N] [--read-ahead] [--sweep-only] [--save-as NAME]
       (also: tgb bench e2e [--quick])
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
import _e2e_analysis as model
import _e2e_cpu as cpu
import _e2e_images as img
from _common import add_results_arg, gpu_names, results_dir, save
from _e2e_runs import PREFETCH, SETUPS, Runner, summarise

FULL = {"resolutions": [224, 448, 896], "batch": 8, "images": 48, "min_mp": 0.5, "max_mp": 2.0, "rounds": 3,
        "run_seconds": 4.5, "min_steps": 12, "max_steps": 36, "warmup": 3, "cal_steps": 8, "schedule": [224, 448],
        "schedule_steps": 24, "crash_steps": 36, "model": {"d_enc": 32, "d_model": 32, "layers": 1, "heads": 2},
        "shared": ["a1_shared", "b_shared"],  # a2_shared measured no better than a1_shared on two cores
        "quiet": 0.1, "max_foreign": 0.05, "retries": 1, "gate_budget_s": 150.0}
QUICK = {"resolutions": [56, 112], "batch": 2, "images": 4, "min_mp": 0.02, "max_mp": 0.05, "rounds": 1,
         "run_seconds": 1.0, "min_steps": 4, "max_steps": 6, "warmup": 2, "cal_steps": 3, "schedule": [56, 112],
         "schedule_steps": 3, "crash_steps": 14, "model": {"d_enc": 8, "d_model": 16, "layers": 1, "heads": 2},
         "shared": ["a2_shared", "b_shared"],  # a1_shared is close to b_shared on two cores
         "quiet": None, "max_foreign": None, "retries": 0, "gate_budget_s": 0.0}


#: the trainer's model on a GPU (``--device cuda``): big enough that a step is not all kernel launches
GPU_MODEL = {"d_enc": 256, "d_model": 1024, "layers": 8, "heads": 16}


def rotate(items: list[Any], k: int) -> list[Any]:
    k %= max(1, len(items))
    return items[k:] + items[:k]


class Sweep:
    """Calibrations and runs of every setup at every resolution, interleaved over rounds."""

    def __init__(self, runner: Runner, cfg: dict[str, Any], setups: list[str], index_digests: list[str]) -> None:
        self.runner, self.cfg, self.setups, self.digests = runner, cfg, setups, index_digests
        self.cal: dict[int, list[dict[str, Any]]] = {}
        self.runs: dict[int, dict[str, list[dict[str, Any]]]] = {}
        self.steps: dict[int, int] = {}
        self.crossover: int | None = None
        self.wall: dict[str, float] = {}  # seconds each setup's runs took, start-up included

    def calibrate(self, res: int) -> None:
        c = self.runner.calibrate(res, img.seq_len(res), self.cfg["cal_steps"],
                                  coded_first=len(self.cal.get(res, [])) % 2 == 1)
        self.cal.setdefault(res, []).append(c)
        print(f"  calibrate {res}: S {c['S_s'] * 1e3:.0f} ms, S+R {c['S_read_s'] * 1e3:.0f} ms "
              f"(compressed {c['S_read_zstd_s'] * 1e3:.0f} ms), D {c['D_s'] * 1e3:.0f} ms "
              f"(compressed {c['D_zstd_s'] * 1e3:.0f} ms) per step", flush=True)

    def find_crossover(self, resolutions: list[int]) -> None:
        self.crossover = model.crossover({res: self.cal[res][0]["D_s"] / self.cal[res][0]["S_s"]
                                          for res in resolutions}, img.PATCH * img.MERGE)
        if self.crossover in self.cal:
            print(f"  D ≈ S at resolution {self.crossover} (of the sweep)", flush=True)
        elif self.crossover is not None:
            print(f"  D = S near resolution {self.crossover}: added to the sweep", flush=True)
            self.calibrate(self.crossover)

    def plan(self, res: int) -> None:
        c = self.cal[res][0]
        steps = round(self.cfg["run_seconds"] / (c["S_s"] + c["D_s"]))
        self.steps[res] = max(self.cfg["min_steps"], min(self.cfg["max_steps"], steps)) + self.cfg["warmup"]

    def round(self, r: int) -> None:
        resolutions = sorted(self.cal) if self.cal else list(self.cfg["resolutions"])
        for res in resolutions:
            self.calibrate(res)
        if r == 0:
            if self.cfg.get("find_crossover", True):
                self.find_crossover(resolutions)
            for res in self.cal:
                self.plan(res)
        for i, res in enumerate(rotate(sorted(self.cal), r)):
            for name in rotate(self.setups, r + i):
                t0 = time.monotonic()
                for attempt in range(1 + self.cfg["retries"]):  # again if other jobs took CPU during the run
                    t1 = time.monotonic()
                    run = self.runner.run(SETUPS[name], res, img.seq_len(res), self.steps[res])
                    gate = run["quiet_gate"]
                    # (c) is never run again: Ray's processes, which its driver does not reap, count as other jobs
                    if self.cfg["max_foreign"] is None or run["foreign_cores"] <= self.cfg["max_foreign"] or \
                            not gate["quiet"] or not self.runner.gate_left_s or SETUPS[name].kind == "fleet":
                        break
                    self.runner.charge(time.monotonic() - t1)
                    print(f"  {name} at {res}: other jobs used {run['foreign_cores']:.2f} cores, again", flush=True)
                self.wall[name] = self.wall.get(name, 0.0) + time.monotonic() - t0
                row = summarise(run, self.cfg["warmup"])
                row["attempts"] = attempt + 1
                extra = PREFETCH * SETUPS[name].workers if SETUPS[name].kind == "colocated" else 0
                row["exactly_once"] = model.exactly_once(run.get("captions", []),
                                                         self.expected(self.steps[res] + extra), {},
                                                         complete=not extra)
                self.runs.setdefault(res, {}).setdefault(name, []).append(row)
            line = ", ".join(f"{n} {self.runs[res][n][-1]['steps_per_s']:.2f}" for n in self.setups)
            print(f"round {r} res {res}: {line} steps/s (load {os.getloadavg()[0]:.2f}; wall so far "
                  f"{ {k: round(v) for k, v in self.wall.items()} })", flush=True)

    def expected(self, steps: int) -> set[str]:
        return set(self.digests[: steps * self.cfg["batch"]])


def schedule(runner: Runner, cfg: dict[str, Any], colocated: str, rounds: int) -> dict[str, Any]:
    """224 -> 448 at step N (``transforms.resolution_schedule``): steps/s before and after, (a) and (b)."""
    lo, hi = cfg["schedule"]
    n = cfg["schedule_steps"]
    warmup = cfg["warmup"]
    spec = {"boundaries": [warmup + n], "values": [lo, hi]}
    out: dict[str, Any] = {"values": [lo, hi], "switch_at_step": warmup + n, "colocated_setup": colocated,
                           "seq_len": img.seq_len(hi), "runs": {colocated: [], "b": []}}
    for r in range(rounds):
        for name in rotate([colocated, "b"], r):
            run = runner.run(SETUPS[name], spec, img.seq_len(hi), warmup + 2 * n)
            out["runs"][name].append(phases(run, hi, warmup))
            print(f"schedule {name}: {out['runs'][name][-1]}", flush=True)
    return out


def phases(run: dict[str, Any], hi: int, warmup: int) -> dict[str, Any]:
    """Steps/s before the first batch at ``hi`` and after it (its own step left out: the transition)."""
    ends, res = run.get("end", []), run.get("res", [])
    switch = next((i for i, x in enumerate(res) if x == hi), None)
    if switch is None or switch < warmup + 2 or len(ends) < switch + 3:
        return {"switch_step": switch, "error": run.get("error") or "the run did not reach both phases"}
    before = (switch - warmup) / (ends[switch - 1] - ends[warmup - 1])
    after = (len(ends) - switch - 1) / (ends[-1] - ends[switch])
    return {"switch_step": switch, "before_steps_per_s": before, "after_steps_per_s": after,
            "bytes_before": run["bytes"][switch - 1], "bytes_after": run["bytes"][-1], "error": run.get("error")}


def crash(runner: Runner, cfg: dict[str, Any], res: int, colocated: str, setups: list[str],
          digests: list[str], data: dict[str, Any]) -> dict[str, Any]:
    """SIGKILL a producer (b), ``ray.kill`` an actor (c) at a third of their batches; SIGKILL a DataLoader worker
    (a) at a third of the trainer's steps."""
    steps = cfg["crash_steps"] + cfg["warmup"]
    kill_at = steps // 3
    window = PREFETCH * SETUPS[colocated].workers  # batches (a)'s workers may have made before the kill
    if steps - kill_at - 1 <= window:  # (a) could then finish on batches made before the kill: nothing measured
        raise ValueError(f"crash_steps={cfg['crash_steps']} leaves {steps - kill_at - 1} steps after the kill, "
                         f"no more than the {window} batches {colocated}'s workers make ahead")
    expected = set(digests[: steps * cfg["batch"]])
    key_of = data["keys"]
    jpeg = img.jpeg_reader(data)

    def recompute(caption: str) -> str:
        return img.image_digest(img.recompute_patches(jpeg(key_of[caption]), res))

    out: dict[str, Any] = {"resolution": res, "steps": steps, "killed_at_step": kill_at, "outage_s": runner.outage}
    for name in [colocated, "b", *(["c"] if "c" in setups else [])]:
        if name == colocated:
            run = runner.run(SETUPS[name], res, img.seq_len(res), steps, kill_at=kill_at, check_every=4)
        else:
            run = runner.run(SETUPS[name], res, img.seq_len(res), steps, hold_at=kill_at, check_every=4)
        ends = run.get("end", [])
        ev = {**run["events"], **next((p for p in run["producers"] if "started_t" in p), {})}
        killed = ev.get("killed_t") or run.get("killed_t")
        back = ev.get("restarted_t") or ev.get("resumed_t")
        row: dict[str, Any] = {
            "setup": name, "steps_done": len(ends), "error": run.get("error"),
            "survived": run.get("error") is None and len(ends) == steps, "steps_lost": steps - len(ends),
            "longest_stall_s": max((b - a for a, b in zip(ends, ends[1:])), default=None),
            "killed": killed is not None,
            "trainer_steps_at_kill": sum(1 for t in ends if t <= killed) if killed is not None else None,
            "producer_running_at_kill": ev.get("producer_running_at_kill", killed is not None),
            "not_killed": ev.get("not_killed"), "worker_deaths": ev.get("worker_deaths"),
            "fleet_error": ev.get("fleet_error"),
        }
        if killed is not None and back is not None:
            row["outage_s"] = back - killed
            row["steps_during_outage"] = sum(1 for t in ends if killed <= t <= back)
        if name != colocated:
            row["exactly_once"] = model.exactly_once(run.get("captions", []), expected, run.get("checks", {}),
                                                     recompute)
        out["a" if name == colocated else name] = row
        print(f"crash {name}: {row}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny images and model, one round (seconds, not minutes)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--resolutions", type=int, nargs="+", default=None)
    parser.add_argument("--trainer-cores", type=int, default=1, help="cores of the trainer's node T (the rest: P)")
    parser.add_argument("--outage", type=float, default=2.0, help="seconds before a killed producer is replaced")
    parser.add_argument("--no-ray", action="store_true", help="leave out (c)")
    parser.add_argument("--no-shared", action="store_true", help="leave out the equal-total-CPU setups")
    parser.add_argument("--no-gate", action="store_true",
                        help="start every run at once (default: wait until other jobs use < 0.1 core, 30 s at most "
                        "per run and 150 s in all, and run again once a run during which they used > 0.05)")
    parser.add_argument("--gate-budget", type=float, default=None, help="seconds the quiet gate may wait in all")
    parser.add_argument("--machine-note", default=None,
                        help="what the machine is, for the results (default: its cores and whether a GPU is seen)")
    parser.add_argument("--workdir", type=Path, default=None, help="namespaces and shards (default: /dev/shm)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the trainer steps: cuda puts the model (GPU_MODEL unless --model) on the GPU, "
                        "(a) copies its pinned batches there, (b) reads with tgb.DataLoader(device='cuda'); "
                        "results go to end_to_end_gpu.json")
    parser.add_argument("--model", type=int, nargs=4, metavar=("D_ENC", "D_MODEL", "LAYERS", "HEADS"), default=None,
                        help="the trainer's model (default: the mode's)")
    parser.add_argument("--read-ahead", action="store_true",
                        help="also (b) with the trainer reading on a thread of its own "
                        "(b_ahead; on with --device cuda)")
    parser.add_argument("--sweep-only", action="store_true",
                        help="the sweep alone: no crossover search, resolution schedule, crash or profiled run")
    parser.add_argument("--save-as", default=None, help="the results file's name (default end_to_end[_gpu]; "
                        "docs/benchmarks.md §12 reads end_to_end_compressed from a --sweep-only run)")
    parser.add_argument("--role", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--config", default=None, help=argparse.SUPPRESS)
    add_results_arg(parser)
    args = parser.parse_args(argv)
    if args.role:
        import _e2e_runs

        _e2e_runs.run_role(args.role, json.loads(Path(args.config).read_text()))  # by hand: no READY/GO
        return 0
    try:
        return measure(args)
    except Exception as exc:  # noqa: BLE001 - a failure says what failed (a suite runs this as a subprocess and shows its output)
        traceback.print_exc()
        print(f"end_to_end: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1


def measure(args: argparse.Namespace) -> int:
    cfg = dict(QUICK if args.quick else FULL)
    cfg["rounds"] = args.rounds or cfg["rounds"]
    cfg["resolutions"] = args.resolutions or cfg["resolutions"]
    if args.gate_budget is not None:
        cfg["gate_budget_s"] = args.gate_budget
    if args.no_gate:
        cfg.update(quiet=None, max_foreign=None, retries=0, gate_budget_s=0.0)
    if args.device == "cuda" and not gpu_names():
        raise ValueError("--device cuda: nvidia-smi names no GPU on this machine")
    cfg["device"] = args.device
    if args.device == "cuda":
        cfg["model"] = GPU_MODEL
    if args.model:
        cfg["model"] = dict(zip(("d_enc", "d_model", "layers", "heads"), args.model))
    if args.sweep_only:
        cfg["find_crossover"] = False
    out_dir = results_dir(args)
    cpus = cpu.available_cpus()
    overlap = len(cpus) < 2 and args.quick  # one core: the quick check still runs, T and P being the same core
    t, p = (cpus, cpus) if overlap else cpu.split_nodes(cpus, args.trainer_cores)
    if overlap:
        print(f"one core ({cpus}): T and P are the same core (quick mode checks the pipeline, not the speed)",
              flush=True)
    torch.set_num_threads(1)  # before any torch op: the roles are forked from here (no OpenMP pool to inherit)
    setups = ["a0", "a1", "a2", "b", "b_zstd"]
    ray_note = "measured"
    if importlib.util.find_spec("ray") is not None:  # found, not imported: a forked fleet driver starts Ray itself
        setups.append("c")
    else:
        ray_note = "ray not installed: pip install 'torch-tgb[ray]'"
    if args.no_ray and "c" in setups:
        setups.remove("c")
        ray_note = "left out (--no-ray)"
    if args.read_ahead or args.device == "cuda":
        setups.append("b_ahead")
    if not args.no_shared:
        setups += cfg["shared"]
    base = args.workdir or (Path("/dev/shm") if _free_bytes(Path("/dev/shm")) > 2**30 else None)
    work = Path(tempfile.mkdtemp(prefix="tgb-e2e-", dir=base))
    started = time.monotonic()
    load_start = cpu.loadavg()
    try:
        samples = (cfg["max_steps"] + cfg["warmup"] + 2 * PREFETCH) * cfg["batch"]  # (a)'s workers run past the end
        samples = max(samples, (max(cfg["crash_steps"], 2 * cfg["schedule_steps"]) + cfg["warmup"]) * cfg["batch"])
        data = img.write_dataset(work / "wds", samples=samples, images=cfg["images"], per_tar=cfg["batch"],
                                 min_mp=cfg["min_mp"], max_mp=cfg["max_mp"])
        by_key = {k: d for d, k in data["keys"].items()}
        digests = [by_key[f"s{i:06d}"] for i in range(samples)]
        runner = Runner(work, t=t, p=p, data=data, batch=cfg["batch"], warmup=cfg["warmup"], model=cfg["model"],
                        outage=args.outage, timeout=600, quiet=cfg["quiet"], gate_budget_s=cfg["gate_budget_s"],
                        device=args.device)
        print(f"nodes: T = {t}, P = {p}; setups {setups}; dataset {data['samples']} samples, "
              f"{data['image_mp_mean']:.2f} MP mean", flush=True)
        sweep = Sweep(runner, cfg, setups, digests)
        for r in range(cfg["rounds"]):
            sweep.round(r)
        summary = {res: model.per_resolution(sweep.cal[res], sweep.runs[res], t=len(t), p=len(p))
                   for res in sorted(sweep.cal)}
        sched = crashed = profile = None
        if not args.sweep_only:
            sched, crashed, profile = after_sweep(runner, cfg, sweep, summary, setups, digests, data)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [row for runs in sweep.runs.values() for name, rs in runs.items() for row in rs
            if SETUPS[name].kind != "fleet"]  # (c)'s own Ray processes count as other jobs: left out
    disturbed = [row for row in rows if cfg["max_foreign"] is not None and (row.get("foreign_cores") or 0) >
                 cfg["max_foreign"]]
    result: dict[str, Any] = {
        "quick": args.quick, "config": {k: v for k, v in cfg.items()},
        "machine_note": args.machine_note or _machine_note(),
        "gpu": _gpu_note(args.device), "device": args.device, "sweep_only": args.sweep_only,
        "nodes": {"T": t, "P": p, "overlap": overlap,
                  "pinning": {name: SETUPS[name].describe(t, p) for name in setups}},
        "dataset": {k: v for k, v in data.items() if k not in ("urls", "keys", "jpegs")},
        "model": {**img.spec_dict(img.ModelSpec(**cfg["model"])),
                  "gflop_per_step": {res: img.flops_per_step(img.ModelSpec(**cfg["model"]), res, cfg["batch"]) / 1e9
                                     for res in summary}},
        "steps_per_run": sweep.steps, "crossover_resolution": sweep.crossover, "ray": ray_note,
        "calibration": sweep.cal, "runs": sweep.runs, "summary": summary, "schedule": sched, "crash": crashed,
        "profile": profile,
        "quiet_rounds": {res: model.quiet_rounds(sweep.runs[res], sweep.cal[res], t=len(t), p=len(p),
                                                 max_foreign=cfg["max_foreign"]) for res in summary}
        if cfg["max_foreign"] is not None else None,
        # the model and issue 29's goals are of a trainer whose step holds a core of T: not of a GPU step
        "projection": model.projection(summary, len(t)) if args.device == "cpu" else None,
        "goals": model.goals(summary, sweep.crossover, crashed) if args.device == "cpu" else {},
        "paper": {name: {"local": a, "batchweave": b, "ratio": g} for name, (a, b, g) in model.PAPER.items()},
        "gate": {"quiet_cores": cfg["quiet"], "budget_s": cfg["gate_budget_s"], "waited_s": runner.gate_spent_s,
                 "exhausted": cfg["quiet"] is not None and runner.gate_left_s == 0,
                 "disturbed_runs": len(disturbed), "runs": len(rows),
                 "disturbed": cfg["quiet"] is not None and (runner.gate_left_s == 0 or bool(disturbed))},
        "load": {"start": load_start, "end": cpu.loadavg()}, "seconds": time.monotonic() - started,
    }
    save(out_dir, args.save_as or ("end_to_end_gpu" if args.device == "cuda" else "end_to_end"), result)
    for res, s in summary.items():
        print(f"{res}: " + ", ".join(f"{key.removesuffix('_over_best_a')} / best (a) {v['median']:.2f}x"
                                     for key, v in s["ratios"].items() if key.endswith("_over_best_a")), flush=True)
    for name, g in result["goals"].items():
        print(f"goal {name}: {'met' if g['met'] else 'NOT met'} {g.get('values', g.get('value', ''))}", flush=True)
    if result["gate"]["disturbed"]:
        print(f"disturbed: other jobs used > {cfg['max_foreign']} core during {len(disturbed)} of {len(rows)} runs "
              f"(gate waited {runner.gate_spent_s:.0f} s of {cfg['gate_budget_s']:.0f})", flush=True)
    print(f"end_to_end: {result['seconds']:.0f} s", flush=True)
    return 0


def after_sweep(runner: Runner, cfg: dict[str, Any], sweep: Sweep, summary: dict[int, Any], setups: list[str],
                digests: list[str], data: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The resolution schedule, the crash runs and the profiled (b) run."""
    mid = cfg["schedule"][1]
    # a0 or a1: with two workers each counts its own steps, so a schedule at step N switches at 2N
    best = max(("a0", "a1"), key=lambda a: summary.get(mid, summary[max(summary)])["setups"][a]
               ["steps_per_s"]["median"])
    sched = schedule(runner, cfg, best, max(1, cfg["rounds"] - 1))
    ahead = {res: s["D_over_S"]["median"] for res, s in summary.items() if s["D_over_S"]["median"] < 1}
    crash_res = min(ahead, key=lambda res: abs(ahead[res] - 0.6)) if ahead else min(summary)
    with_worker = max(("a1", "a2"), key=lambda a: summary[crash_res]["setups"][a]["steps_per_s"]["median"])
    crashed = crash(runner, cfg, crash_res, with_worker, setups, digests, data)
    prof_res = sweep.crossover if sweep.crossover in summary else max(summary)
    profiled = runner.run(SETUPS["b"], prof_res, img.seq_len(prof_res), sweep.steps[prof_res], profile=True)
    profile = {"resolution": prof_res, "setup": "b", **(profiled.get("profile") or {}),
               "run": summarise(profiled, cfg["warmup"])}
    return sched, crashed, profile


def _gpu_note(device: str) -> str:
    gpus = gpu_names()  # nvidia-smi: CUDA is never initialised in this process, whose children are forked
    if device == "cuda":
        return f"{gpus[0] if gpus else 'a GPU'}: the trainer steps on it"
    return "none lent to this run: the trainer steps on CPU core(s) T" if not gpus else \
        f"{gpus[0]} seen, not used (--device cuda runs the trainer on it)"


def _free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def _machine_note() -> str:
    gpus = gpu_names()
    gpu = gpus[0] if gpus else "no GPU"
    return f"{os.cpu_count()} cores ({len(cpu.available_cpus())} usable by this process), {gpu}"


if __name__ == "__main__":
    sys.exit(main())
