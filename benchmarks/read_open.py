"""Reads counted from the reader's construction, and workers against no workers; before/after in one run.

Issue 43's CPU figures. The project's other read benchmarks start their clock
after a reader's first batch, so they leave out each reader's open (and a
DataLoader's worker start). Here every pass builds a fresh reader and the
clock starts before it is built (``open``: what a user's run pays), and, in
the same process, a pass whose clock starts after the first batch
(``steady``: the per-batch cost alone).

Corpus: ``_labels_read.build`` (uint16 token rows, ``ROWS`` x ``SEQ`` =
32x512 per step, one rank), delivered as int64 ``input_ids`` + ``labels``.
Readers:

* ``floor``: ``np.memmap`` of the flat ``.npy``, the step's tokens cast once,
  the two keys views of that copy (no checks, no -100);
* ``tgb``: ``TGBDataset(dtype=int64)``, the default (labels masked on read);
* ``tgb_views``: the same with ``derive=()`` (two views of one cast copy);
* ``tgb_loader``: ``tgb.DataLoader(num_workers=0)``, the default read;
* ``tgb_loader_w2``: ``tgb.DataLoader(num_workers=2)``.

``--before TREE`` (a directory holding an older ``torch_tgb``, e.g.
``git archive BASE torch_tgb | tar -x -C TREE``) measures every tgb reader
under that tree too, interleaved with this tree's in the same rounds: each
reader runs in a fresh Python process (``PYTHONPATH`` = its tree), the order
rotated per round, and each figure is a ratio to the floor of the same round
and mode (the box may be shared and noisy: compare ratios, not times).

Reported per tree, reader and mode: median tokens/s and median ratio to the
floor; and per tree and mode the median of ``tgb_loader_w2 / tgb_loader`` per
round (issue 43: goal >= 1.0; the default read's ``open`` ratio: goal >= 0.5).

Usage: python benchmarks/read_open.py [--before TREE] [--rounds 5] [--steps 512] [--passes 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TREE = HERE.parent  # this checkout (its torch_tgb)
READERS = ("floor", "tgb", "tgb_views", "tgb_loader", "tgb_loader_w2")
MODES = ("open", "steady")


def _reader(name: str, corpus: dict[str, Any]) -> Iterator[Any]:
    """A fresh reader ``name`` over ``corpus`` (run in the child: imports the child's torch_tgb)."""
    import torch

    sys.path.insert(0, str(HERE))
    from _labels_read import _floor

    if name == "floor":
        return _floor(corpus)
    import torch_tgb as tgb

    ns, mesh = corpus["tokens"], tgb.Mesh(0, 1)
    if name == "tgb":
        return iter(tgb.TGBDataset(ns, mesh, dtype=torch.int64))
    if name == "tgb_views":
        return iter(tgb.TGBDataset(ns, mesh, dtype=torch.int64, keys=("input_ids", "labels"), derive=()))
    if name == "tgb_loader":
        return iter(tgb.DataLoader(ns, mesh, dtype=torch.int64))
    if name == "tgb_loader_w2":
        return iter(tgb.DataLoader(ns, mesh, dtype=torch.int64, num_workers=2))
    raise ValueError(f"unknown reader {name!r}")


def child(name: str, corpus: dict[str, Any], passes: int) -> dict[str, float]:
    """Median tokens/s of ``passes`` passes per mode, the modes alternating (one process, one reader kind)."""
    import logging

    import torch

    torch.set_num_threads(1)
    logging.getLogger("torch_tgb.stall").setLevel(logging.ERROR)  # a loop without work stalls by design
    speeds: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(passes):
        for mode in MODES:
            started = time.perf_counter()
            it = _reader(name, corpus)
            tokens = 0
            for i, batch in enumerate(it):
                if i == 0 and mode == "steady":
                    started = time.perf_counter()  # the open and first batch left out
                    continue
                if batch["labels"].dtype != torch.int64 or batch["labels"].shape != batch["input_ids"].shape:
                    raise AssertionError(f"{name}: labels do not match input_ids")
                tokens += batch["input_ids"].numel()
            elapsed = time.perf_counter() - started
            speeds[mode].append(tokens / elapsed)
            del it
    return {mode: statistics.median(v) for mode, v in speeds.items()}


def _measure(tree: Path, name: str, corpus: dict[str, Any], passes: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", name, "--corpus", json.dumps(corpus), "--passes", str(passes)],
        env=env, check=True, capture_output=True, text=True, timeout=1800,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=None, help="a tree with an older torch_tgb to compare")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=512, help="steps of 32x512 tokens per pass")
    parser.add_argument("--passes", type=int, default=5, help="passes per mode in each reader process (median)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: print only)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, json.loads(args.corpus), args.passes)))
        return 0
    sys.path.insert(0, str(HERE))
    from _common import machine
    from _labels_read import build

    trees = {"after": TREE} if args.before is None else {"before": args.before.resolve(), "after": TREE}
    runs = [("floor", "floor")] + [(t, r) for t in trees for r in READERS[1:]]
    got: dict[tuple[str, str], list[dict[str, float]]] = {run: [] for run in runs}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = build(tmp, args.steps)
        for r in range(args.rounds):
            for tree, name in runs[r % len(runs):] + runs[: r % len(runs)]:
                got[(tree, name)].append(_measure(trees.get(tree, TREE), name, corpus, args.passes))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    floor = got[("floor", "floor")]
    rows = []
    for (tree, name), per_round in got.items():
        for mode in MODES:
            ratios = [x[mode] / f[mode] for x, f in zip(per_round, floor)]
            rows.append({"tree": tree, "reader": name, "mode": mode,
                         "tokens_per_s": statistics.median(x[mode] for x in per_round),
                         "ratio_to_floor": statistics.median(ratios), "ratio_per_round": ratios})
    workers = [
        {"tree": tree, "mode": mode, "w2_over_w0": statistics.median(
            w2[mode] / w0[mode] for w2, w0 in zip(got[(tree, "tgb_loader_w2")], got[(tree, "tgb_loader")]))}
        for tree in trees for mode in MODES
    ]
    for row in rows:
        print(f"{row['tree']:7s} {row['reader']:15s} {row['mode']:6s} {row['tokens_per_s'] / 1e6:8.1f} M tok/s  "
              f"x{row['ratio_to_floor']:.3f} of floor")
    for w in workers:
        print(f"{w['tree']:7s} num_workers=2 / num_workers=0 ({w['mode']}): x{w['w2_over_w0']:.3f}")
    report = {"benchmark": "read_open", "machine": machine(), "steps": args.steps, "rows_x_seq": [32, 512],
              "rounds": args.rounds, "passes": args.passes, "before": str(args.before) if args.before else None,
              "results": rows, "workers": workers}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
