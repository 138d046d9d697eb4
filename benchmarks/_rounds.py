"""Interleaved rounds of readers, each pass in a fresh process, compared with a baseline of the same round.

A *reader* is a function ``() -> iterator of batches`` plus how many bytes a
batch delivers. :func:`compare` runs every reader once per round (the order
rotated, so none is always first), each in a forked process that makes
``passes`` passes and reports its median pass (one preemption on a shared
machine halves a short pass; the median of several is what a steady reader
sees), and reports per reader the median over rounds of its bytes/s and of
its ratio to the baseline's bytes/s in the same round.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

Reader = Callable[[], Iterator[Any]]


def _one(reader: Reader, size: Callable[[Any], int], passes: int, results: Any) -> None:
    torch.set_num_threads(1)
    speeds = []
    for _ in range(passes):
        it = reader()
        first = next(it)  # opening (dataset.json, first poll) is not per-step work
        total, steps = 0, 0
        started = time.perf_counter()
        for batch in it:
            total += size(batch)
            steps += 1
        elapsed = time.perf_counter() - started
        speeds.append((total / elapsed if elapsed else 0.0, steps / elapsed if elapsed else 0.0))
        del first
    speeds.sort()
    results.put(speeds[len(speeds) // 2])


def measure(reader: Reader, size: Callable[[Any], int], passes: int) -> tuple[float, float]:
    """(bytes/s, steps/s) of ``reader``'s median pass, in a fresh forked process."""
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    proc = ctx.Process(target=_one, args=(reader, size, passes, results))
    proc.start()
    got = results.get(timeout=900)
    proc.join()
    if proc.exitcode:
        raise RuntimeError(f"reader process exited with {proc.exitcode}")
    return got


def compare(readers: dict[str, tuple[Reader, Callable[[Any], int]]], *, baseline: str, rounds: int, passes: int,
            log: Callable[[str], None] = print, unit: str = "bytes") -> list[dict[str, Any]]:
    """One row per reader: median ``unit``/s (what its size function counts), steps/s and ratio to ``baseline``."""
    names = list(readers)
    per_round: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            reader, size = readers[name]
            per_round[name].append(measure(reader, size, passes))
    rows = []
    for name in names:
        runs = per_round[name]
        ratios = [run[0] / base[0] for run, base in zip(runs, per_round[baseline])]
        row = {
            "reader": name,
            f"{unit}_per_s": statistics.median(x[0] for x in runs),
            "steps_per_s": statistics.median(x[1] for x in runs),
            "ratio_to_baseline": statistics.median(ratios),
            "ratio_per_round": ratios,
        }
        rows.append(row)
        log(f"  {name:24s} {row[f'{unit}_per_s'] / 1e6:9.1f} M {unit}/s  {row['steps_per_s']:9.1f} steps/s  "
            f"x{row['ratio_to_baseline']:.3f} of {baseline}")
    return rows


def nbytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
