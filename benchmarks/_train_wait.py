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
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

import torch_tgb as tgb
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.layout import Mesh

from _hot_path import SHAPE, _dataloader, build  # noqa: E402  (sibling module)

LOADERS = ("dl_memmap", "dl_memmap_w2", "tgb", "tgb_prefetch", "tgb_w2")
BASELINE = "dl_memmap"


def _loader(name: str, corpus: dict[str, Any]) -> Iterator[torch.Tensor]:
    if name == "dl_memmap":
        yield from _dataloader(corpus, 0, 1, torch.int64)
        return
    if name == "dl_memmap_w2":
        rows = SHAPE[0]
        index = list(range(corpus["steps"] * rows))
        from _hot_path import _Rows

        ds = _Rows(corpus["raw"], corpus["steps"], torch.int64)
        yield from torch.utils.data.DataLoader(ds, batch_size=rows, sampler=index, num_workers=2)
        return
    options = ReaderOptions(dtype=torch.int64, inline_local=name != "tgb_prefetch")
    loader = tgb.DataLoader(corpus[("tgb_segments", 1)], mesh=Mesh(0, 1), options=options,
                            num_workers=2 if name == "tgb_w2" else 0)
    for batch in loader:
        yield batch["input_ids"]


def _step_matrix(compute_ms: float) -> torch.Tensor:
    """A square matrix whose 1-thread matmul takes about ``compute_ms`` (calibrated here)."""
    n = 128
    while True:
        a = torch.randn(n, n)
        started = time.perf_counter()
        for _ in range(3):
            a @ a
        took = (time.perf_counter() - started) / 3 * 1e3
        if took >= compute_ms or n >= 4096:
            return a
        n = int(n * min(2.0, max(1.1, (compute_ms / max(took, 1e-3)) ** (1 / 3))))


def _run(name: str, corpus: dict[str, Any], compute_ms: float, results: Any) -> None:
    torch.set_num_threads(1)
    a = _step_matrix(compute_ms)
    it = _loader(name, corpus)
    first = next(it)  # construction and the first batch are not per-step waits
    assert tuple(first.shape) == SHAPE and first.dtype == torch.int64, (first.shape, first.dtype)
    waits, computes = [], []
    while True:
        started = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        got = time.perf_counter()
        waits.append(got - started)
        (a @ a).sum().item()  # the training step
        batch.sum().item()  # the step reads its batch
        computes.append(time.perf_counter() - got)
    results.put((name, waits, computes))


def measure(name: str, corpus: dict[str, Any], compute_ms: float) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    proc = ctx.Process(target=_run, args=(name, corpus, compute_ms, results))
    proc.start()
    _, waits, computes = results.get(timeout=900)
    proc.join()
    if proc.exitcode:
        raise RuntimeError(f"{name}: training-loop process exited with {proc.exitcode}")
    w = np.asarray(waits) * 1e6
    return {"steps": len(waits), "wait_mean_us": float(w.mean()), "wait_p50_us": float(np.percentile(w, 50)),
            "wait_p95_us": float(np.percentile(w, 95)), "step_ms": float(np.mean(computes) * 1e3)}


def train_wait(*, quick: bool, rounds: int, tmp: str, compute_ms: float,
               log: Callable[[str], None]) -> dict[str, Any]:
    steps = 128 if quick else 512
    corpus = build(tmp, steps, [1])
    per_round: dict[str, list[dict[str, Any]]] = {name: [] for name in LOADERS}
    for r in range(rounds):
        order = LOADERS[r % len(LOADERS):] + LOADERS[: r % len(LOADERS)]
        for name in order:
            per_round[name].append(measure(name, corpus, compute_ms))
    out: dict[str, Any] = {"shape": list(SHAPE), "dtype": "int64", "steps": steps, "rounds": rounds,
                           "compute_ms": compute_ms, "baseline": BASELINE, "results": []}
    for name in LOADERS:
        runs = per_round[name]
        ratios = [run["wait_mean_us"] / base["wait_mean_us"] for run, base in zip(runs, per_round[BASELINE])]
        row = {
            "loader": name,
            **{k: statistics.median(x[k] for x in runs) for k in ("wait_mean_us", "wait_p50_us", "wait_p95_us", "step_ms")},
            "wait_over_baseline": statistics.median(ratios),
            "wait_over_baseline_per_round": ratios,
        }
        out["results"].append(row)
        log(f"train wait {name:13s}: mean {row['wait_mean_us']:8.1f} us  p50 {row['wait_p50_us']:8.1f}  "
            f"p95 {row['wait_p95_us']:8.1f}  per {row['step_ms']:.1f} ms step  x{row['wait_over_baseline']:.2f} "
            f"of {BASELINE}")
    return out
