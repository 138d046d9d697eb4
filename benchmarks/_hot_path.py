"""The consumer hot path at the issue-15 shape, measured side by side with its floor.

One corpus of ``steps`` global batches of 32x512 uint32 tokens (16M tokens by
default), read by ``P`` processes at once (``P`` in 1 and 8; each process is a
DP rank of ``Layout(dp=P)`` and reads its 32/P x 512 slice of every step):

* ``floor``: ``np.memmap`` slice of a raw token file -> tensor (the memory floor);
* ``dl_memmap``: torch DataLoader over a map-style dataset of memmap rows
  (Megatron style: one row per item, default collate, ``num_workers=0``);
* ``tgb_one``: TGBDataset over a namespace with one TGB per object (what a
  streaming ``Producer`` writes by default);
* ``tgb_segments``: TGBDataset over the same batches in ~256 MiB segment
  objects (what ``write_dataset`` writes), read by the run path
  (``datapipes.read.local_runs``) with the default ``verify="first"``: each
  slice's CRC32C is checked once, which the floor does not do;
* ``tgb_segments_noverify``: the same with ``verify="never"``, the floor's
  terms (the difference between the two rows is the CRC32C itself);
* ``tgb_segments_steps``: the same with ``ReaderOptions(runs=False)``, the
  step-by-step pipeline (``Project -> FooterIndex -> RangeReader``) that the
  run path replaces for this shape;
* ``tgb_loader``: ``tgb_segments`` read through ``tgb.DataLoader(num_workers=0)``
  (what a training loop holds): the row minus ``tgb_segments`` is the
  loader's own cost per step.

Each loader delivers either the stored dtype (uint32, no copy where the loader
allows it) or int64 (``ReaderOptions(dtype=torch.int64)`` for torch_tgb, a cast
for the others). Rounds are interleaved (every loader once per round, order
rotated); in a round each reader process makes 5 passes over the corpus and
reports its median pass (a pass lasts tens of ms: one preemption on a shared
machine halves it). Each round's ratios are taken against the floor of the
same round; the median over rounds is reported with p50/p95 per-batch latency.
``ratio_to_floor`` compares tokens/s (stalls included), ``p50_ratio_to_floor``
the median per-batch cost (what a step costs when the process is running).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from torch_tgb.consumer import DataLoader, TGBDataset
from torch_tgb.consumer import ReaderOptions
from torch_tgb.layout import Layout, Mesh
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import LocalStore

SHAPE = (32, 512)
LOADERS = ("floor", "dl_memmap", "tgb_one", "tgb_segments", "tgb_segments_noverify", "tgb_segments_steps", "tgb_loader")
#: ReaderOptions of each torch_tgb loader (besides the dtype), and the namespace it reads
TGB_READS = {
    "tgb_one": ("tgb_one", {}),
    "tgb_segments": ("tgb_segments", {}),
    "tgb_segments_noverify": ("tgb_segments", {"verify": "never"}),
    "tgb_segments_steps": ("tgb_segments", {"runs": False}),
    "tgb_loader": ("tgb_segments", {}),
}
#: the torch_tgb loaders read through tgb.DataLoader rather than a bare TGBDataset
THROUGH_LOADER = frozenset({"tgb_loader"})
DTYPES = {"stored": None, "int64": torch.int64}


def build(root: str, steps: int, worlds: list[int]) -> dict[str, Any]:
    """The raw token file and, per world size, the two namespaces (same batches)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50000, size=(steps, *SHAPE), dtype=np.uint32)
    raw = os.path.join(root, "raw.bin")
    tokens.tofile(raw)
    out: dict[str, Any] = {"raw": raw, "steps": steps}
    for world in worlds:
        for name, config in (("tgb_one", ProducerConfig()), ("tgb_segments", ProducerConfig.bulk(256 << 20))):
            ns = os.path.join(root, f"{name}-dp{world}")
            store = LocalStore(ns, fsync=False)  # a benchmark scratch namespace
            with Producer(store, producer_id="hot", layout=Layout(dp=world), commit_policy="fixed:64",
                          config=config) as p:
                for i in range(steps):
                    p.append({"input_ids": torch.from_numpy(tokens[i])}, offset=i)
                p.close(seal=True)
            out[(name, world)] = ns
            out[(name, world, "objects")] = sum(len(f) for _, _, f in os.walk(os.path.join(ns, "data")))
    return out


def _batches(loader: str, corpus: dict[str, Any], rank: int, world: int, dtype: torch.dtype | None) -> Iterator[Any]:
    steps, rows = corpus["steps"], SHAPE[0] // world
    if loader == "floor":
        mm = np.memmap(corpus["raw"], dtype=np.uint32, mode="c", shape=(steps, *SHAPE))
        for i in range(steps):
            t = torch.from_numpy(mm[i, rank * rows : (rank + 1) * rows])
            yield t if dtype is None else t.to(dtype)
    elif loader == "dl_memmap":
        yield from _dataloader(corpus, rank, world, dtype)
    else:
        name, options = TGB_READS[loader]
        ds = TGBDataset(corpus[(name, world)], mesh=Mesh(rank, world), prefetch=4,
                        options=ReaderOptions(dtype=dtype, **options))
        for batch in DataLoader(ds) if loader in THROUGH_LOADER else ds:
            yield batch["input_ids"]


class _Rows(torch.utils.data.Dataset):
    """Megatron-style map dataset: one memmap row per item, copied out."""

    def __init__(self, raw: str, steps: int, dtype: torch.dtype | None) -> None:
        self.mm = np.memmap(raw, dtype=np.uint32, mode="r", shape=(steps * SHAPE[0], SHAPE[1]))
        self.dtype = dtype

    def __len__(self) -> int:
        return len(self.mm)

    def __getitem__(self, j: int) -> torch.Tensor:
        t = torch.from_numpy(np.array(self.mm[j]))
        return t if self.dtype is None else t.to(self.dtype)


def _dataloader(corpus: dict[str, Any], rank: int, world: int, dtype: torch.dtype | None) -> Iterator[Any]:
    rows = SHAPE[0] // world
    index = [i * SHAPE[0] + rank * rows + r for i in range(corpus["steps"]) for r in range(rows)]
    ds = _Rows(corpus["raw"], corpus["steps"], dtype)
    yield from torch.utils.data.DataLoader(ds, batch_size=rows, sampler=index, num_workers=0)


def _run_one(loader: str, corpus: dict[str, Any], rank: int, world: int, dtype_name: str, passes: int,
             barrier: Any, results: Any) -> None:
    """``passes`` passes over the corpus in this process; the median pass's tokens/s and every pass's gaps.

    One pass of 1024 steps lasts a few tens of ms, short enough for one preemption on a shared machine to
    halve it: the median of several passes in one process is what a steady reader sees.
    """
    torch.set_num_threads(1)
    speeds, gaps = [], []
    for p in range(passes):
        it = _batches(loader, corpus, rank, world, DTYPES[dtype_name])
        first = next(it)  # opening (dataset.json, first poll) is not per-step work
        tokens = first.numel()
        if p == 0:
            barrier.wait()
        started = last = time.perf_counter()
        n = 0
        for batch in it:
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            n += 1
            if batch.numel() != tokens:
                raise AssertionError(f"{loader}: batch of {batch.numel()} tokens, expected {tokens}")
        elapsed = last - started
        speeds.append(n * tokens / elapsed if elapsed else 0.0)
    results.put((rank, statistics.median(speeds), gaps))


def measure(loader: str, corpus: dict[str, Any], world: int, dtype_name: str, passes: int) -> dict[str, Any]:
    """``world`` processes reading concurrently, ``passes`` passes each; per-rank throughput and latencies."""
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=_run_one, args=(loader, corpus, r, world, dtype_name, passes, barrier, results))
             for r in range(world)]
    for p in procs:
        p.start()
    got = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"{loader} rank process exited with {p.exitcode}")
    gaps = np.concatenate([np.asarray(g) for _, _, g in got])
    return {
        "tokens_per_s_per_rank": float(np.mean([tps for _, tps, _ in got])),
        "p50_us": float(np.percentile(gaps, 50) * 1e6),
        "p95_us": float(np.percentile(gaps, 95) * 1e6),
    }


def hot_path(*, quick: bool, rounds: int, worlds: list[int], tmp: str, log: Callable[[str], None]) -> dict[str, Any]:
    steps = 256 if quick else 1024  # 4M / 16M tokens
    passes = 2 if quick else 5
    corpus = build(tmp, steps, worlds)
    out: dict[str, Any] = {
        "shape": list(SHAPE), "stored_dtype": "uint32", "steps": steps, "tokens": steps * SHAPE[0] * SHAPE[1],
        "rounds": rounds, "passes_per_process": passes,
        "objects": {f"{n}-dp{w}": corpus[(n, w, "objects")] for n in ("tgb_one", "tgb_segments") for w in worlds},
        "results": [],
    }
    for world in worlds:
        for dtype_name in DTYPES:
            per_round: dict[str, list[dict[str, Any]]] = {name: [] for name in LOADERS}
            for r in range(rounds):
                order = LOADERS[r % len(LOADERS):] + LOADERS[: r % len(LOADERS)]  # rotate: no loader always first
                for name in order:
                    per_round[name].append(measure(name, corpus, world, dtype_name, passes))
            for name in LOADERS:
                runs = per_round[name]
                ratios = [run["tokens_per_s_per_rank"] / floor["tokens_per_s_per_rank"]
                          for run, floor in zip(runs, per_round["floor"])]
                # per-batch cost ratio: robust to the stalls a shared, oversubscribed machine adds
                p50_ratios = [floor["p50_us"] / run["p50_us"] for run, floor in zip(runs, per_round["floor"])]
                row = {
                    "processes": world, "dtype": dtype_name, "loader": name,
                    "tokens_per_s_per_rank": statistics.median(x["tokens_per_s_per_rank"] for x in runs),
                    "p50_us": statistics.median(x["p50_us"] for x in runs),
                    "p95_us": statistics.median(x["p95_us"] for x in runs),
                    "ratio_to_floor": statistics.median(ratios),
                    "ratio_to_floor_per_round": ratios,
                    "p50_ratio_to_floor": statistics.median(p50_ratios),
                }
                out["results"].append(row)
                log(f"hot path P={world} {dtype_name:6s} {name:12s}: {row['tokens_per_s_per_rank'] / 1e6:9.1f} M tok/s/rank "
                    f"p50 {row['p50_us']:8.1f} us  p95 {row['p95_us']:8.1f} us  x{row['ratio_to_floor']:.3f} of floor "
                    f"(p50 x{row['p50_ratio_to_floor']:.3f})")
    return out
