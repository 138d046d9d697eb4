"""Provenance's cost at rest and on ingest (issue 47): the same BFD-packed corpus produced with and without it.

A token file of ``--docs`` documents (log-normal lengths 8..8000 tokens,
uint16) is packed by BFD into rows of 2048 tokens, global batches of 64 rows
over ``dp=8``, segments of 16 TGBs, and produced to a local namespace with
``Pack(provenance=False)`` and with provenance, ``--rounds`` times
alternating. Reports the bytes per document-in-row (pieces of a record in a
row) that provenance adds to the TGBs and to the lineage index, and the ingest
time of each side: the rounds interleave the two (off/on, then on/off), so a
shared machine's load falls on both; reported are the median of each side,
the median of the rounds' ratios and their spread (``--quick``: a small
corpus, for the suite's ``tgb bench`` test).

Usage: python benchmarks/provenance_cost.py [--docs N] [--rounds N] [--quick] [--work DIR] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save

import torch_tgb as tgb
from torch_tgb import sources
from torch_tgb.datapipes import GlobalBatches, Pack
from torch_tgb.lineage import dataset_card
from torch_tgb.producer import ProducerConfig


def _size(root: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(root) for f in fs)


def produce(work: str, provenance: bool) -> tuple[float, float, int, int, str]:
    """Produce the corpus with or without provenance: wall and CPU seconds (all threads), bytes of data and index."""
    ns = os.path.join(work, f"ns-{provenance}")
    shutil.rmtree(ns, ignore_errors=True)
    docs = sources.TokenFile(os.path.join(work, "c.npy"), offsets=os.path.join(work, "c.idx"), name="c")
    rows = Pack(docs, 2048, window=512, method="bfd", token_dtype=torch.uint16, provenance=provenance)
    layout = tgb.Layout(dp=8, seq_keys=("input_ids",), labels_from="input_ids")
    t, cpu = time.perf_counter(), time.process_time()
    tgb.produce(ns, GlobalBatches(rows, global_batch_size=64, layout=layout), producer_id="p", seal=True,
                config=ProducerConfig(segment_tgbs=16))
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    lineage = _size(os.path.join(ns, "_tgb", "lineage")) if provenance else 0
    return seconds, cpu, _size(os.path.join(ns, "data")), lineage, ns


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=250_000)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--quick", action="store_true", help="2,000 documents, 2 rounds: that it runs, not what it costs")
    p.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    add_results_arg(p)
    args = p.parse_args(argv)
    if args.quick:
        args.docs, args.rounds = 2_000, 2
    work = args.work or tempfile.mkdtemp(prefix="tgb-prov-cost-")
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(5.5, 1.0, args.docs).astype(np.int64), 8, 8000)
    np.save(os.path.join(work, "c.npy"), rng.integers(1, 50000, int(lengths.sum())).astype(np.uint16))
    np.concatenate([[0], np.cumsum(lengths)]).astype("<i8").tofile(os.path.join(work, "c.idx"))
    runs: dict[bool, list[float]] = {False: [], True: []}
    cpus: dict[bool, list[float]] = {False: [], True: []}
    sizes: dict[bool, tuple[int, int]] = {}
    ns_on = ""
    for k in range(args.rounds):
        for prov in (False, True) if k % 2 == 0 else (True, False):
            seconds, cpu, data, lineage, ns = produce(work, prov)
            runs[prov].append(seconds)
            cpus[prov].append(cpu)
            sizes[prov] = (data, lineage)
            ns_on = ns if prov else ns_on
            print(f"round {k}: provenance {'on ' if prov else 'off'} {seconds:.2f} s ({cpu:.2f} s CPU)", flush=True)
    card = dataset_card(ns_on)
    spans = sum(int(s["spans"]) for s in card["sources"])
    in_tgbs = (sizes[True][0] - sizes[False][0]) / spans
    index = sizes[True][1] / spans
    ratios = np.array(runs[True]) / np.array(runs[False]) - 1  # round by round: the same load on both sides
    cpu_ratios = np.array(cpus[True]) / np.array(cpus[False]) - 1  # CPU: what other processes' load changes least
    result: dict[str, Any] = {
        "docs": args.docs, "tokens": card["packing"]["tokens"], "rows": card["packing"]["rows"],
        "document_pieces": spans, "bytes_per_piece_tgbs": in_tgbs, "bytes_per_piece_index": index,
        "bytes_per_piece_total": in_tgbs + index, "seconds_off": runs[False], "seconds_on": runs[True],
        "median_off": float(np.median(runs[False])), "median_on": float(np.median(runs[True])),
        "overhead_median": float(np.median(runs[True]) / np.median(runs[False]) - 1),
        "overhead_per_round": ratios.tolist(), "overhead_round_median": float(np.median(ratios)),
        "overhead_fastest": min(runs[True]) / min(runs[False]) - 1,
        "cpu_off": cpus[False], "cpu_on": cpus[True],
        "cpu_overhead_median": float(np.median(cpus[True]) / np.median(cpus[False]) - 1),
        "cpu_overhead_per_round": cpu_ratios.tolist(), "cpu_overhead_round_median": float(np.median(cpu_ratios)),
    }
    print(f"{spans} document pieces in {result['rows']} rows: {in_tgbs:.1f} B each in the TGBs + {index:.1f} B in "
          f"the index = {in_tgbs + index:.1f} B; median {result['median_off']:.2f} s off, {result['median_on']:.2f} s "
          f"on ({result['overhead_median']:+.1%}; rounds' ratios: median {result['overhead_round_median']:+.1%}, "
          f"{ratios.min():+.1%} .. {ratios.max():+.1%}); CPU: median {np.median(cpus[False]):.2f} s off, "
          f"{np.median(cpus[True]):.2f} s on ({result['cpu_overhead_median']:+.1%}; rounds' ratios "
          f"{cpu_ratios.min():+.1%} .. {cpu_ratios.max():+.1%})")
    # a quick run keeps the full one
    save(results_dir(args), "provenance_cost_quick" if args.quick else "provenance_cost", result)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
