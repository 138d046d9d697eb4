"""The processes of one ``end_to_end.py`` run: trainer, producer, calibration, each a JSON config in, JSON out.

The orchestrator forks each on its node's cores (``_e2e_proc.Proc``);
``end_to_end.py --role NAME --config PATH`` runs one by hand.

- ``trainer``: builds the model, says ``READY``, waits for ``GO``,
  then takes ``steps`` training steps from (a) a ``torch.utils.data.DataLoader``
  whose ``workers`` processes run the producer pipeline (shard ``i`` of
  ``workers``; 0: in the trainer itself), or (b)/(c) ``tgb.DataLoader`` over the
  namespace the producers write. Per step: wall time between step ends, the
  time ``next()`` blocked (the wait for data), bytes delivered, the caption of
  every row, and every ``check_every`` steps the first row's patch digest.
  CPU seconds on its node over the steady window (steps ``warmup`` .. end):
  its own and its DataLoader workers', and the node's cores' busy time. At
  step ``kill_at`` of (a) it SIGKILLs one of its DataLoader workers.
- ``producer``: ``tgb.produce`` of the pipeline (``TimedPipeline`` counts its
  CPU seconds per step: the pipeline and the append of each batch). In a
  crash run of (b)/(c) it stops at batch ``hold["at"]`` until it is killed
  (``hold_for_kill``).
- ``calibrate``: S, the training step's CPU seconds on batches in memory,
  and S + R, the same steps fed by ``tgb.DataLoader`` from a namespace.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import _e2e_cpu as cpu
import _e2e_images as img
import torch
from _e2e_proc import ready
from torchdata.nodes import BaseNode

import torch_tgb as tgb
from torch_tgb.layout import RaggedRows


def resolution_of(spec: Any) -> Any:
    """An int, or ``{"boundaries": [N], "values": [224, 448]}`` for a schedule."""
    if isinstance(spec, dict):
        from torch_tgb.transforms import resolution_schedule

        return resolution_schedule(spec["boundaries"], spec["values"])
    return int(spec)


def build_pipeline(cfg: dict[str, Any], shard: tuple[int, int]) -> Any:
    return img.pipeline(cfg["urls"], resolution=resolution_of(cfg["resolution"]), batch=cfg["batch"], seq=cfg["seq"],
                        shard=shard)


class TimedPipeline(BaseNode[dict[str, Any]]):
    """Passes the pipeline's batches through; the CPU seconds of this process at each batch go to ``report``.

    The time between two batches is the pipeline's work for one and the
    caller's (``Producer.append``) for the one before. State: the pipeline's.
    """

    def __init__(self, inner: BaseNode[Any], report: str, hold: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.inner, self.report, self.hold = inner, report, hold
        self.marks: list[float] = []  # CPU seconds of this process when each batch was handed on
        self.inside: list[float] = []  # of which the pipeline's own, for that batch
        self.bytes: list[int] = []

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        torch.set_num_threads(1)  # one producer process = one core (also inside a Ray actor)
        self.inner.reset(initial_state)

    def next(self) -> dict[str, Any]:
        t = time.process_time()
        try:
            batch = next(self.inner)
        except StopIteration:
            self.write()
            raise
        self.marks.append(time.process_time())
        self.inside.append(self.marks[-1] - t)
        if self.hold is not None and len(self.marks) == self.hold["at"] + 1:
            hold_for_kill(self.hold)
        self.bytes.append(sum(v.numel() * v.element_size() for x in batch.values()
                              for v in (x if isinstance(x, list) else [x.values] if isinstance(x, RaggedRows) else [x])))
        return batch

    def get_state(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def write(self) -> None:
        n = len(self.marks)
        per = (self.marks[-1] - self.marks[0]) / (n - 1) if n > 1 else None
        pre = sum(self.inside[1:]) / (n - 1) if n > 1 else None
        Path(self.report).write_text(json.dumps({"batches": n, "cpu_s_per_step": per, "pipeline_s_per_step": pre,
                                                 "pid": os.getpid(),
                                                 "bytes_per_step": sum(self.bytes) / n if n else None}))


def hold_for_kill(hold: dict[str, Any]) -> None:
    """A crash run's kill point: the first process to reach it (the file is created exclusively) says so in
    ``hold["file"]`` (its pid, the time) and waits there, its batch made but not handed on, until it is killed
    (``hold["max_s"]`` at most). Its replacement, or a restarted actor, finds the file and goes on: the kill
    falls mid-production whatever the speeds of producer and trainer."""
    try:
        fd = os.open(hold["file"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "t": time.monotonic()}, f)
    time.sleep(hold.get("max_s", 60))


def read_hold(path: str) -> dict[str, Any] | None:
    """The kill point's note (pid, time), once the process that holds there has written it whole."""
    try:
        return json.loads(Path(path).read_text())  # type: ignore[no-any-return]
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def producer(cfg: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    node = TimedPipeline(build_pipeline(cfg, tuple(cfg["shard"])), cfg["out"], cfg.get("hold"))
    if cfg.get("go") and not ready():
        return
    # shard i of a job of n declared shards: the namespace is sealed when every shard is done, whatever the
    # order they start and finish in (a producer sealing on its own could end the stream before another registered)
    report = tgb.produce(cfg["ns"], node, shard=tuple(cfg["shard"]), layout=img.layout(),
                         commit_policy=cfg.get("commit_policy", "dac"), progress=False, codecs=cfg.get("codecs") or {})
    if report.already_complete:  # a replacement of a producer killed after its shard was done: nothing left to do
        Path(cfg["out"]).write_text(json.dumps({"batches": 0, "cpu_s_per_step": None, "sealed_before_start": True}))
        return
    if not Path(cfg["out"]).exists():  # a resumed producer whose pipeline had nothing left
        node.write()
    data = json.loads(Path(cfg["out"]).read_text())
    data.update(start_offset=report.start_offset, end_offset=report.end_offset, resumed=report.resumed)
    Path(cfg["out"]).write_text(json.dumps(data))


class Colocated(torch.utils.data.IterableDataset):
    """(a): the producer pipeline inside the DataLoader's workers, shard ``i`` of ``n`` in worker ``i``."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        node = build_pipeline(self.cfg, (info.id, info.num_workers) if info else (0, 1))
        node.reset()
        while True:
            try:
                yield img.reader_form(next(node))
            except StopIteration:
                return


def _loader(cfg: dict[str, Any]) -> Any:
    if cfg["setup"] == "colocated":
        w = cfg["workers"]
        warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores: meant
        return torch.utils.data.DataLoader(Colocated(cfg), batch_size=None, num_workers=w,
                                           prefetch_factor=cfg.get("prefetch", 4) if w else None,
                                           pin_memory=_device(cfg) == "cuda")
    from torch_tgb.datapipes.read.poller import PollPolicy

    from torch_tgb.consumer.options import ReaderOptions

    return tgb.DataLoader(cfg["ns"], mesh=tgb.Mesh(dp_rank=0, dp_size=1), timeout=cfg.get("timeout", 300),
                          poll=PollPolicy(min_interval=0.005, max_interval=0.05),
                          options=ReaderOptions(inline_local=False) if cfg.get("read_ahead") else None,
                          device="cuda" if _device(cfg) == "cuda" else None)


def _device(cfg: dict[str, Any]) -> str:
    return cfg.get("device") or "cpu"


def _on_device(batch: dict[str, torch.Tensor], cfg: dict[str, Any]) -> dict[str, torch.Tensor]:
    """(a) on a GPU: the loop copies its (pinned) batch as Megatron's does; tgb.DataLoader delivered it there."""
    if _device(cfg) != "cuda" or cfg["setup"] != "colocated":
        return batch
    return {k: v.to("cuda", non_blocking=True) for k, v in batch.items()}


def _host(batch: dict[str, torch.Tensor], check: bool) -> dict[str, torch.Tensor]:
    """What the bookkeeping reads, on the host (a GPU batch's tokens and grid; its patches when checked)."""
    keys = ("input_ids", "image_grid_thw", *(("pixel_values", "pixel_values_offsets") if check else ()))
    return {k: batch[k].cpu() for k in keys}


class OneWorkerDeath:
    """A SIGCHLD handler for (a)'s kill: torch's raises wherever the main thread is when the worker dies, and again
    at every later SIGCHLD while the dead worker is registered, after the loop too, where it would end the trainer
    before it writes its result. This one lets torch's raise once, and only until the loop ends (``disarm``)."""

    def __init__(self) -> None:
        self.armed = True
        self.previous = signal.getsignal(signal.SIGCHLD)
        signal.signal(signal.SIGCHLD, self)

    def __call__(self, signum: int, frame: Any) -> None:
        if self.armed and callable(self.previous):
            self.armed = False  # first: its raise ends the loop
            self.previous(signum, frame)

    def disarm(self) -> None:
        self.armed = False


def trainer(cfg: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    model = img.Trainer(img.ModelSpec(**cfg["model"]), _device(cfg))
    if not ready():
        return
    loader = _loader(cfg)
    steps, warmup, kill_at = cfg["steps"], cfg["warmup"], cfg.get("kill_at")
    it = iter(loader)
    worker_pids = [w.pid for w in getattr(it, "_workers", [])]
    pids = [os.getpid(), *worker_pids]
    rec: dict[str, list[Any]] = {k: [] for k in ("end", "wait", "compute", "compute_cpu", "bytes", "captions", "res")}
    checks: dict[str, str] = {}
    first = last = None
    error = None
    killed_t = None
    profiler = cProfile.Profile() if cfg.get("profile") else None
    started = time.monotonic()
    death: OneWorkerDeath | None = None
    try:
        try:
            for step in range(steps):
                t0 = time.monotonic()
                try:
                    batch = _on_device(next(it), cfg)
                except StopIteration:
                    break
                t1, c1 = time.monotonic(), time.thread_time()
                model.step(batch)
                t2, c2 = time.monotonic(), time.thread_time()
                rec["end"].append(t2)
                rec["wait"].append(t1 - t0)
                rec["compute"].append(t2 - t1)
                rec["compute_cpu"].append(c2 - c1)
                rec["bytes"].append(img.batch_bytes(batch))
                check = bool(cfg.get("check_every")) and step % cfg["check_every"] == 0
                host = _host(batch, check)
                rec["captions"].append(img.row_digests(host))
                rec["res"].append(int(host["image_grid_thw"][0, 1]) * img.PATCH)
                if check:
                    checks.update(list(img.first_image_digests(host).items())[:1])
                if step + 1 == warmup:
                    first = cpu.snapshot(pids)
                    if profiler is not None:
                        profiler.enable()
                if step == kill_at and worker_pids:  # (a): the trainer's own worker dies, as in seed 000 §2.2
                    death = OneWorkerDeath()
                    killed_t = time.monotonic()
                    os.kill(worker_pids[0], signal.SIGKILL)
        finally:
            if death is not None:
                death.disarm()
    except Exception as exc:  # noqa: BLE001 - (a)'s death on a killed worker is the measurement
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    last = cpu.snapshot(pids)
    if profiler is not None:
        profiler.disable()
    window = cpu.window_cpu(first, last, cfg["trainer_cpus"]) if first else None
    Path(cfg["out"]).write_text(json.dumps({
        **rec, "started": started, "checks": checks, "error": error, "window_cpu": window,
        "worker_pids": worker_pids, "pid": os.getpid(), "killed_t": killed_t,
        "profile": profile_rows(profiler) if profiler is not None else None,
    }))


def profile_rows(profiler: cProfile.Profile, top: int = 15) -> dict[str, Any]:
    """The profiled window's functions with the most time of their own (tottime), and the total."""
    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, name), (_, calls, own, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(path).name}:{line}" if line else path
        rows.append({"function": f"{where}({name})", "calls": calls, "own_s": own, "cumulative_s": cum})
    rows.sort(key=lambda r: -r["own_s"])
    return {"total_s": stats.total_tt, "top": rows[:top],  # type: ignore[attr-defined]
            "groups": profile_groups(stats.stats)}  # type: ignore[attr-defined]


#: (file name, function) whose cumulative time is one part of the trainer's loop
PROFILE_GROUPS = {
    "training step (forward, backward, AdamW)": [("_e2e_images.py", "step")],
    "next batch (the wait for data and reading it)": [("dataloader.py", "__next__"), ("loader.py", "__next__")],
    "sleeping in the wait (polls)": [("~", "<built-in method time.sleep>")],
    "bookkeeping of this benchmark (digests, bytes)": [("_e2e_images.py", "row_digests"),
                                                       ("_e2e_images.py", "batch_bytes"),
                                                       ("_e2e_images.py", "first_image_digests")],
}


def profile_groups(raw: dict[tuple[str, int, str], Any]) -> dict[str, float]:
    """Cumulative seconds of each part of ``PROFILE_GROUPS`` (the outermost call of a name counts once)."""
    out = {}
    for group, names in PROFILE_GROUPS.items():
        total = 0.0
        for file, func in names:
            hits = [v[3] for (path, _, name), v in raw.items() if name == func and Path(path).name == file]
            total += max(hits, default=0.0)
        out[group] = total
    return out


def calibrate(cfg: dict[str, Any]) -> None:
    """S (CPU s per step on batches in memory) and S + R (fed by tgb.DataLoader) on the trainer's node."""
    torch.set_num_threads(1)
    device = _device(cfg)
    model = img.Trainer(img.ModelSpec(**cfg["model"]), device)
    # S is CPU seconds on the trainer's core; on a GPU, wall seconds of a step that ends on its loss read back
    clock = time.perf_counter if device == "cuda" else time.process_time
    fed, fed_wall = [], []  # first, in a fresh process: each byte range is checksummed on its first read, as in a run
    it = iter(tgb.DataLoader(cfg["ns"], mesh=tgb.Mesh(0, 1), device="cuda" if device == "cuda" else None))
    model.step(next(it))  # opening (dataset.json, the first poll and footer) and the model's first call
    while True:
        c, w = clock(), time.perf_counter()
        try:
            b = next(it)
        except StopIteration:
            break
        model.step(b)
        fed.append(clock() - c)  # the process's CPU: a compressed namespace's decoding on the read-ahead threads too
        fed_wall.append(time.perf_counter() - w)
    batches = [{k: v.clone().to(device) for k, v in b.items()} for b in tgb.TGBDataset(cfg["ns"], mesh=tgb.Mesh(0, 1))]
    memory = []
    for b in batches:
        c = clock()
        model.step(b)
        memory.append(clock() - c)
    Path(cfg["out"]).write_text(json.dumps({"S_s": sorted(memory)[len(memory) // 2], "S_steps": memory,
                                            "S_read_s": sorted(fed)[len(fed) // 2], "S_read_steps": fed,
                                            "S_read_wall_s": sorted(fed_wall)[len(fed_wall) // 2],
                                            "bytes_per_step": img.batch_bytes(batches[0])}))


#: the roles run in one process (the fleet driver, ``_e2e_ray.fleet``, is the other): ``_e2e_runs.run_role``
ROLES = {"trainer": trainer, "producer": producer, "calibrate": calibrate}
