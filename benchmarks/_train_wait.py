"""How long a training loop waits for data per step: tgb.DataLoader against the DataLoader-over-memmap baseline.

Issue 15's third goal. A loop alternates ``next(loader)`` with a fixed CPU
"training step" (a 1-thread matmul sized to about ``compute_ms``, which
releases the GIL the way a real step's kernels do) and times only the wait
in ``next``. The corpus and the batch are the hot path's (32x512 uint32,
delivered as int64); every loader runs in its own fresh process, rounds are
interleaved with the order rotated, and each round's waits are compared with
the baseline's of the same round.

Loaders:

* ``dl_memmap``: torch DataLoader over a map-style memmap dataset, no workers
  (Megatron style, as in the hot path);
* ``dl_memmap_w2``: the same with 2 worker processes;
* ``tgb``: ``tgb.DataLoader`` with its defaults (local reads inline);
* ``tgb_prefetch``: ``ReaderOptions(inline_local=False)``: a reader thread
  fetches ``prefetch`` steps ahead while the step computes;
* ``tgb_w2``: ``tgb.DataLoader(num_workers=2)``.

On a GPU (``device="cuda"``, section ``train_wait_cuda`` of consumer_read.py)
the step is a bf16 matmul on the GPU sized to about ``compute_ms`` and the
loop ends each step on ``.item()`` (a loss read back, as a logging loop does);
the baselines pin their batches (``pin_memory=True``) and the loop copies each
one with ``.to("cuda", non_blocking=True)`` inside the timed wait, as
Megatron's loop does; the ``tgb`` loaders are ``tgb.DataLoader(device="cuda")``
(uint32 copied, cast to int64 on the device, one step ahead on a side stream).
Reported beside the wait: ``iter_ms``, wait plus step, since a copy on the
training stream shows up in the step, not in the wait. The parent never
touches CUDA: every loader runs in a forked child that initialises it.
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import queue
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

import torch_tgb as tgb
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.layout import Mesh

from _hot_path import SHAPE, _Rows, build  # noqa: E402  (sibling module)

LOADERS = ("dl_memmap", "dl_memmap_w2", "tgb", "tgb_prefetch", "tgb_w2")
BASELINE = "dl_memmap"
#: seconds a training-loop process may run; past them it prints every thread's stack and exits (a hang says where)
STALL_S = 60.0


def _loader(name: str, corpus: dict[str, Any], device: str) -> Iterator[torch.Tensor]:
    if name in ("dl_memmap", "dl_memmap_w2"):
        ds = _Rows(corpus["raw"], corpus["steps"], torch.int64)
        index = list(range(corpus["steps"] * SHAPE[0]))
        cuda = device == "cuda"
        for batch in torch.utils.data.DataLoader(ds, batch_size=SHAPE[0], sampler=index, pin_memory=cuda,
                                                 num_workers=2 if name == "dl_memmap_w2" else 0):
            yield batch.to(device, non_blocking=True) if cuda else batch
        return
    options = ReaderOptions(dtype=torch.int64, inline_local=name != "tgb_prefetch")
    loader = tgb.DataLoader(corpus[("tgb_segments", 1)], mesh=Mesh(0, 1), options=options,
                            num_workers=2 if name == "tgb_w2" else 0, device=device if device == "cuda" else None)
    for batch in loader:
        yield batch["input_ids"]


def _step_matrix(compute_ms: float, device: str) -> tuple[torch.Tensor, float]:
    """A square matrix whose matmul takes about ``compute_ms`` (calibrated here): 1 CPU thread, or bf16 on the GPU."""
    cuda = device == "cuda"
    n, most = (1024, 32768) if cuda else (128, 4096)
    while True:
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16 if cuda else torch.float32)
        (a @ a).sum().item()  # warm (the GPU's kernels and clocks)
        started = time.perf_counter()
        for _ in range(3):
            (a @ a).sum().item()
        took = (time.perf_counter() - started) / 3 * 1e3
        if took >= compute_ms or n >= most:
            return a, took
        # a multiple of 64: an unaligned bf16 matmul falls off cuBLAS's fast kernels (3-6x slower on an H200)
        n = -(-int(n * min(2.0, max(1.1, (compute_ms / max(took, 1e-3)) ** (1 / 3)))) // 64) * 64


def _run(name: str, corpus: dict[str, Any], compute_ms: float, device: str, results: Any) -> None:
    faulthandler.dump_traceback_later(STALL_S, exit=True)
    torch.set_num_threads(1)
    a, calibrated_ms = _step_matrix(compute_ms, device)
    it = _loader(name, corpus, device)
    first = next(it)  # construction and the first batch are not per-step waits
    assert tuple(first.shape) == SHAPE and first.dtype == torch.int64, (first.shape, first.dtype)
    assert first.device.type == device, (name, first.device)
    waits, computes = [], []
    while True:
        started = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        got = time.perf_counter()
        waits.append(got - started)
        (a @ a).sum().item()  # the training step (on the GPU: ends on a value read back)
        batch.sum().item()  # the step reads its batch
        computes.append(time.perf_counter() - got)
    faulthandler.cancel_dump_traceback_later()
    results.put((name, waits, computes, {"matrix_n": a.shape[0], "calibrated_ms": calibrated_ms}))


def measure(name: str, corpus: dict[str, Any], compute_ms: float, device: str = "cpu") -> dict[str, Any]:
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    proc = ctx.Process(target=_run, args=(name, corpus, compute_ms, device, results))
    proc.start()
    deadline = time.monotonic() + STALL_S + 30
    while True:
        try:
            _, waits, computes, step = results.get(timeout=1.0)
            break
        except queue.Empty:
            if proc.is_alive() and time.monotonic() < deadline:
                continue
            proc.kill()
            proc.join()
            raise RuntimeError(f"{name} on {device}: the training-loop process ended without a result (exit code "
                               f"{proc.exitcode}; past {STALL_S:.0f} s it prints its threads' stacks above)") from None
    proc.join()
    if proc.exitcode:
        raise RuntimeError(f"{name}: training-loop process exited with {proc.exitcode}")
    w = np.asarray(waits) * 1e6
    return {"steps": len(waits), "wait_mean_us": float(w.mean()), "wait_p50_us": float(np.percentile(w, 50)),
            "wait_p95_us": float(np.percentile(w, 95)), "step_ms": float(np.mean(computes) * 1e3),
            "iter_ms": float(np.mean(np.add(waits, computes)) * 1e3), **step}


def train_wait(*, quick: bool, rounds: int, tmp: str, compute_ms: float,
               log: Callable[[str], None], device: str = "cpu") -> dict[str, Any]:
    steps = 128 if quick else 512
    corpus = build(tmp, steps, [1])
    per_round: dict[str, list[dict[str, Any]]] = {name: [] for name in LOADERS}
    failed: dict[str, str] = {}  # a loader whose process failed or hung is left out of the later rounds
    for r in range(rounds):
        order = LOADERS[r % len(LOADERS):] + LOADERS[: r % len(LOADERS)]
        for name in order:
            if name in failed:
                continue
            try:
                run = measure(name, corpus, compute_ms, device)
            except RuntimeError as exc:
                if name == BASELINE:
                    raise
                failed[name] = str(exc)
                log(f"train wait {name}: FAILED: {exc}")
                continue
            per_round[name].append(run)
            log(f"  round {r} {name}: wait mean {run['wait_mean_us']:.1f} us, {run['iter_ms']:.2f} ms per step "
                f"(matmul {run['matrix_n']}², {run['calibrated_ms']:.2f} ms when calibrated)")
    out: dict[str, Any] = {"shape": list(SHAPE), "dtype": "int64", "steps": steps, "rounds": rounds,
                           "compute_ms": compute_ms, "baseline": BASELINE, "device": device, "results": [],
                           "failed": failed}
    for name in LOADERS:
        if name in failed:
            continue
        runs = per_round[name]
        ratios = [run["wait_mean_us"] / base["wait_mean_us"] for run, base in zip(runs, per_round[BASELINE])]
        iters = [run["iter_ms"] / base["iter_ms"] for run, base in zip(runs, per_round[BASELINE])]
        row = {
            "loader": name,
            **{k: statistics.median(x[k] for x in runs)
               for k in ("wait_mean_us", "wait_p50_us", "wait_p95_us", "step_ms", "iter_ms")},
            "wait_over_baseline": statistics.median(ratios),
            "wait_over_baseline_per_round": ratios,
            "iter_over_baseline": statistics.median(iters),
        }
        out["results"].append(row)
        log(f"train wait {name:13s}: mean {row['wait_mean_us']:8.1f} us  p50 {row['wait_p50_us']:8.1f}  "
            f"p95 {row['wait_p95_us']:8.1f}  per {row['step_ms']:.2f} ms step ({row['iter_ms']:.2f} with the wait)  "
            f"x{row['wait_over_baseline']:.2f} "
            f"of {BASELINE}")
    return out
