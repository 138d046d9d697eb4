"""End to end (seed 000 §7.2 analogue): a CPU-heavy transform feeding a training step, colocated vs disaggregated.

Each sample is generated text tokenised with a BPE tokenizer trained here
with the ``tokenizers`` library (CPU-heavy, deterministic per offset); a
small torch model (embedding + MLP + LM head) trains on 8x256 batches.

(a) colocated: ``torch.utils.data.DataLoader`` with ``--workers`` worker
    processes doing the transform, in the trainer's process group;
(b) disaggregated: ``--workers`` producer process(es) run the same
    transform and write TGBs with ``tgb.Producer``; the trainer reads them
    with ``tgb.DataLoader``;
(c) Ray fleet: the same producers as ``--workers`` Ray actors
    (``torch_tgb.integrations.ray.Fleet``, one shard per actor, offsets
    dealt as in (b)); the trainer reads as in (b). Without Ray: recorded as
    not installed.
Equal total CPU: one trainer process (1 torch thread) + ``--workers`` data
processes in all three (Ray adds its own GCS and raylet processes, said in
the results). Reported: steps/s and step latency p50/p95 (wall time between
the trainer's steps, waiting included) and the first step's wait.

Crash: at a third of the run one data process gets SIGKILL (the crash runs
use a transform of about 0.6 trainer step, ``crash_setup``, so that the
producers are still producing at the kill and a backlog exists). (a) the
DataLoader raises in the trainer (the run dies; steps until then are
reported). (b) the trainer keeps stepping on what is committed while a
replacement producer starts after ``--outage`` seconds and resumes at its
``resume_offset``; reported: steps during the outage, the longest wait
between steps, an exactly-once check (offsets 0..N-1 each delivered once,
contents equal to a recomputation), and whether the producer was still running when killed
(when it outpaces the trainer it may have finished). (c) ``ray.kill`` of the
actor running a shard at the same step: Ray restarts it and the fleet gives
it the shard back, which resumes at its last commit; reported as (b), the
outage running from the kill until the fleet shows a new attempt of the
shard committing.

Usage: python benchmarks/end_to_end.py [--quick] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import _e2e_ray
from _common import add_results_arg, pct, results_dir, save

import torch_tgb as tgb

ROWS, SEQ, VOCAB = 8, 256, 2000
CRASH_RATIO = 0.6  # the crash runs' transform, as a fraction of the trainer's step (see crash_setup)
WORDS = [f"w{chr(97 + i % 26)}{chr(97 + (i // 26) % 26)}{i % 7}" for i in range(3000)]


def train_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, 50)) for _ in range(2000)]
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["[UNK]"]))
    tok.save(str(path))


class Transform:
    """offset -> {input_ids [ROWS, SEQ], offset [1]}: generate text, tokenise ``repeat`` times (the CPU cost)."""

    def __init__(self, tokenizer_path: str, words: int):
        self.path, self.words, self.tok = tokenizer_path, words, None

    def __call__(self, offset: int) -> dict[str, torch.Tensor]:
        if self.tok is None:
            from tokenizers import Tokenizer

            self.tok = Tokenizer.from_file(self.path)
        rows = []
        for r in range(ROWS):
            rng = np.random.default_rng(offset * ROWS + r)
            text = " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), self.words))
            ids = self.tok.encode(text).ids[:SEQ]
            rows.append(ids + [0] * (SEQ - len(ids)))
        return {"input_ids": torch.tensor(rows, dtype=torch.int64), "offset": torch.full((ROWS,), offset)}


class OffsetDataset(torch.utils.data.Dataset):
    def __init__(self, transform: Transform, n: int):
        self.transform, self.n = transform, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.transform(i)


def make_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 128), torch.nn.Linear(128, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, VOCAB))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train(batches, n: int, *, on_step=None) -> dict[str, Any]:
    """Step the model on ``n`` batches; returns per-step wall times and the offsets seen."""
    model, opt = make_model()
    times, offsets, digests = [], [], []
    error = None
    last = time.perf_counter()
    try:
        for step, batch in enumerate(batches):
            ids = batch["input_ids"].reshape(-1, SEQ)
            logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            times.append(now - last)
            last = now
            offsets.append(int(batch["offset"].reshape(-1)[0]))
            digests.append(hashlib.blake2b(ids.numpy().tobytes(), digest_size=8).hexdigest())
            if on_step is not None:
                on_step(step)
            if step + 1 >= n:
                break
    except Exception as exc:  # noqa: BLE001 - (a)'s crash behaviour is the measurement
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return {"times": times, "offsets": offsets, "digests": digests, "error": error}


def summarise(run: dict[str, Any], warmup: int) -> dict[str, Any]:
    t = run["times"][warmup:]
    return {"steps": len(run["times"]), "steps_per_s": len(t) / sum(t) if t else 0.0,
            "step_p50_ms": pct(t, 50) * 1e3, "step_p95_ms": pct(t, 95) * 1e3, "error": run["error"],
            "first_step_s": run["times"][0] if run["times"] else None}


def colocated(args, transform: Transform, crash_at: int | None) -> dict[str, Any]:
    loader = torch.utils.data.DataLoader(OffsetDataset(transform, args.steps), batch_size=None,
                                         num_workers=args.workers, prefetch_factor=4)

    def on_step(step: int) -> None:
        if step == crash_at:
            os.kill(mp.active_children()[0].pid, signal.SIGKILL)

    return train(loader, args.steps, on_step=on_step)


def _producer_cmd(args, ns: str, index: int) -> list[str]:
    return [sys.executable, __file__, "--produce", ns, "--tokenizer", str(args.tokenizer), "--steps",
            str(args.steps), "--words", str(args.words), "--workers", str(args.workers), "--index", str(index)]


def produce(args) -> None:
    """Producer process ``index`` of ``workers``: offsets index, index+workers, ... (one producer_id each)."""
    torch.set_num_threads(1)
    transform = Transform(str(args.tokenizer), args.words)
    with tgb.Producer(args.produce, producer_id=f"p{args.index}", layout=tgb.Layout(dp=1),
                      commit_policy="fixed:2") as p:
        start = p.resume_offset
        for offset in range(start, args.steps):
            if offset % args.workers == args.index:
                p.append(transform(offset), offset=offset)
        p.flush()


def disaggregated(args, ns: str, crash_at: int | None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    procs = [subprocess.Popen(_producer_cmd(args, ns, i), env=env) for i in range(args.workers)]
    outage: dict[str, Any] = {}

    def restart() -> None:
        time.sleep(args.outage)
        outage["restarted_at_step"] = outage["step_now"]
        outage["restarted_t"] = time.perf_counter()
        procs.append(subprocess.Popen(_producer_cmd(args, ns, 0), env=env))

    def on_step(step: int) -> None:
        outage["step_now"] = step
        if step == crash_at:
            outage["producer_running_at_kill"] = procs[0].poll() is None  # else it had finished: nothing lost
            procs[0].send_signal(signal.SIGKILL)
            outage["killed_at_step"] = step
            outage["killed_t"] = time.perf_counter()
            threading.Thread(target=restart, daemon=True).start()

    loader = tgb.DataLoader(ns, mesh=tgb.Mesh(dp_rank=0, dp_size=1), num_workers=0, timeout=120)
    try:
        run = train(loader, args.steps, on_step=on_step)
    finally:
        for p in procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
    run["outage"] = outage
    return run


def ray_fleet(args, ns: str, crash_at: int | None) -> dict[str, Any]:
    """(c): the producers of (b) as a Ray fleet, read as in (b); at ``crash_at`` one actor is killed."""
    return _e2e_ray.ray_fleet(ns, make_transform=functools.partial(Transform, str(args.tokenizer), args.words),
                              steps=args.steps, workers=args.workers, train=train, crash_at=crash_at)


def exactly_once(run: dict[str, Any], transform: Transform, n: int, checks: int) -> dict[str, Any]:
    offsets = run["offsets"]
    by_offset = dict(zip(offsets, run["digests"]))
    sample = sorted(np.random.default_rng(1).choice(n, min(checks, n), replace=False).tolist())
    same = all(hashlib.blake2b(transform(o)["input_ids"].numpy().tobytes(), digest_size=8).hexdigest()
               == by_offset.get(o) for o in sample)
    return {"delivered": len(offsets), "unique": len(set(offsets)), "in_order": offsets == sorted(offsets),
            "complete": sorted(offsets) == list(range(n)), "contents_match_recomputation": same,
            "checked_offsets": len(sample)}


def warm_ms(transform: Transform, reps: int = 3) -> float:
    """Median ms of ``transform`` on a few offsets after one untimed call (which loads the tokenizer)."""
    transform(0)
    times = []
    for offset in range(1, reps + 1):
        t = time.perf_counter()
        transform(offset)
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[reps // 2]


def crash_setup(args, colocated_runs: list[dict[str, Any]]) -> tuple[argparse.Namespace, Transform]:
    """The crash runs' settings: a transform heavier than the steady one unless ``--crash-words`` is given.

    A producer much faster than the trainer finishes before the kill at step N/3 and the crash tests nothing;
    one slower than the trainer leaves no backlog to step on during the outage. So the crash runs scale the
    words per row for a transform of about ``CRASH_RATIO`` of the trainer's step p50 measured in the steady (a)
    rounds (scaled twice, timing the transform each time); all three setups use it.
    """
    step_ms = sorted(r["step_p50_ms"] for r in colocated_runs)[len(colocated_runs) // 2]
    words = args.crash_words or args.words
    for _ in range(0 if args.crash_words else 2):
        ms = warm_ms(Transform(str(args.tokenizer), words))
        words = max(args.words, round(words * CRASH_RATIO * step_ms / ms))
    crash = argparse.Namespace(**{**vars(args), "words": words})
    heavier = Transform(str(args.tokenizer), words)
    crash.transform_ms = warm_ms(heavier)
    return crash, heavier


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 steps, lighter transform")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--words", type=int, default=None, help="words of generated text per row (the CPU cost)")
    parser.add_argument("--workers", type=int, default=1, help="data processes in both setups")
    parser.add_argument("--outage", type=float, default=2.0, help="seconds before the killed producer restarts")
    parser.add_argument("--crash-words", type=int, default=None,
                        help=f"words per row in the crash runs (default: a transform of ~{CRASH_RATIO} trainer step)")
    parser.add_argument("--produce", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    add_results_arg(parser)
    args = parser.parse_args(argv)
    args.steps = args.steps or (40 if args.quick else 150)
    args.words = args.words or (600 if args.quick else 1000)
    if args.produce:
        produce(args)
        return 0
    torch.set_num_threads(1)
    out = results_dir(args)
    warmup = 5
    try:
        import ray

        import torch_tgb.integrations.ray  # noqa: F401 - the fleet; fails here, not in the first (c) run
        ray_ok = True
    except ImportError as e:
        ray_ok, ray_missing = False, f"ray not installed ({e}): pip install 'torch-tgb[ray]'"
        print(f"(c) ray fleet: {ray_missing}", flush=True)
    with contextlib.ExitStack() as stack:
        if ray_ok:
            # started once for the whole run: its own processes (GCS, raylet) idle beside (a) and (b) too
            ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
            stack.callback(ray.shutdown)
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tgb-e2e-"))
        args.tokenizer = Path(tmp) / "bpe.json"
        train_tokenizer(args.tokenizer)
        transform = Transform(str(args.tokenizer), args.words)
        t = time.perf_counter()
        transform(0)
        transform_ms = (time.perf_counter() - t) * 1e3
        result: dict[str, Any] = {
            "quick": args.quick, "steps": args.steps, "batch": [ROWS, SEQ], "transform_ms_per_batch": transform_ms,
            "cpu_split": f"trainer: 1 process, 1 torch thread; data: {args.workers} process(es) "
            f"(DataLoader workers in (a), tgb.Producer processes in (b), Ray actors of num_cpus=1 in a Ray started "
            f"with num_cpus={args.workers} in (c)); machine has {os.cpu_count()} cores",
            "ray": "measured" if ray_ok else ray_missing,
            "ray_overhead": "(c) also runs Ray's own processes (GCS, raylet; up for the whole script, so beside (a) "
            "and (b) too) and the fleet's driver thread in the trainer process (polls every 0.1 s)",
            "paper": "seed 000 §7.2: disaggregated producers keep the trainer stepping; the colocated loader "
            "shares the trainer's failure domain",
        }
        runs: dict[str, list] = {"colocated": [], "disaggregated": [], **({"ray_fleet": []} if ray_ok else {})}
        for r in range(2 if args.quick else 3):  # interleaved A B C A B C
            runs["colocated"].append(summarise(colocated(args, transform, None), warmup))
            runs["disaggregated"].append(
                summarise(disaggregated(args, str(Path(tmp) / f"ns{r}"), None), warmup))
            if ray_ok:
                c = ray_fleet(args, str(Path(tmp) / f"ray{r}"), None)
                runs["ray_fleet"].append({**summarise(c, warmup), **c["outage"]})  # worker deaths without a kill
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]['steps_per_s']:.2f}" for k, v in runs.items())
                  + " steps/s", flush=True)
        result["steady"] = runs
        crash, crash_transform = crash_setup(args, runs["colocated"])
        crash_at = args.steps // 3
        a = colocated(crash, crash_transform, crash_at)
        b = disaggregated(crash, str(Path(tmp) / "ns_crash"), crash_at)
        o = b["outage"]
        outage_steps = (o.get("restarted_at_step", 0) - o.get("killed_at_step", 0)) if o else None
        checks = 10 if args.quick else 30
        result["crash"] = {
            "killed_at_step": crash_at, "outage_s": args.outage, "words": crash.words,
            "target_ratio_to_step": CRASH_RATIO, "transform_ms_per_batch": crash.transform_ms,
            "colocated": {**summarise(a, warmup), "survived": a["error"] is None and len(a["times"]) == args.steps},
            "disaggregated": {**summarise(b, warmup), "survived": b["error"] is None and len(b["times"]) == args.steps,
                              "steps_during_outage": outage_steps,
                              "producer_running_at_kill": o.get("producer_running_at_kill"),
                              "longest_wait_s": max(b["times"][1:], default=None),
                              "exactly_once": exactly_once(b, crash_transform, args.steps, checks)},
        }
        if ray_ok:
            c = ray_fleet(crash, str(Path(tmp) / "ray_crash"), crash_at)
            o = c["outage"]
            result["crash"]["ray_fleet"] = {
                **summarise(c, warmup), "survived": c["error"] is None and len(c["times"]) == args.steps,
                **o, "steps_during_outage": (o["resumed_at_step"] - o["killed_at_step"]
                                             if o.get("resumed_at_step") is not None else None),
                "longest_wait_s": max(c["times"][1:], default=None),
                "exactly_once": exactly_once(c, crash_transform, args.steps, checks)}
        print(f"crash: colocated survived={result['crash']['colocated']['survived']} "
              f"({result['crash']['colocated']['error']}); disaggregated survived="
              f"{result['crash']['disaggregated']['survived']}, steps during outage {outage_steps}, producer running "
              f"at the kill {result['crash']['disaggregated']['producer_running_at_kill']}, "
              f"exactly once {result['crash']['disaggregated']['exactly_once']}", flush=True)
        if ray_ok:
            f = result["crash"]["ray_fleet"]
            print(f"crash: ray fleet survived={f['survived']}, actor killed at trainer step {f.get('killed_at_step')} "
                  f"({f.get('not_killed', 'killed')}), "
                  f"resumed after {f.get('resumed_after_s')} s, steps during outage {f['steps_during_outage']}, "
                  f"worker deaths {f.get('worker_deaths')}, exactly once {f['exactly_once']}", flush=True)
    save(out, "end_to_end", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
