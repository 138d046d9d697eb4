"""The I/O floor of ingesting a token file: what reading its documents in a shuffled order costs before any format.

Issue 28 asks ``tgb.produce`` from a token file for >= 0.25x numpy's read of
the same file. numpy reads the file in one sequential pass; a producer reads
its documents in the source's shuffled order (``TokenFile``'s default), one
place in the file per document. This measures, on the corpus ``ingest.py``
uses (uint16 documents of 50-3000 tokens), from a cold page cache:

* ``numpy_disk`` / ``numpy_cache``: ``np.load`` of the file, page cache dropped
  first / warm (the baselines of ``ingest.py``);
* ``floor_shuffled``: each document read with one ``pread`` in a seeded random
  order into a 32 MiB buffer, the buffer written to a file and the file
  fsynced at the end: no packing, no format, no checksum, no Python object per
  document beyond the loop;
* ``floor_in_order``: the same in file order (what an unshuffled source pays);
* ``floor_warmed``: ``floor_shuffled`` after one sequential pass over the file
  into a reused 8 MiB buffer (the page cache filled at the disk's sequential
  speed, the pass timed with the rest): what a producer could do for a file
  that fits the page cache.

Each round is one cold pass of each; the median of ``--rounds`` is reported
with its ratio to ``numpy_disk`` in the same round. Compare ``tgb.produce``'s
figure in ``ingest.json`` (measured by ``ingest.py`` in its own run).

    python benchmarks/ingest_floor.py [--tokens N] [--rounds R] [--results-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save
from ingest import evict_file as evict
from ingest import token_corpus


def make_token_file(root: Path, num_tokens: int, seed: int = 0) -> tuple[Path, np.ndarray]:
    """``ingest.py``'s token file (:func:`ingest.token_corpus`): the ``.npy`` and its document offsets."""
    tokens, offsets = token_corpus(num_tokens, seed)
    path = root / "corpus.npy"
    np.save(path, tokens)
    return path, offsets


def numpy_read(path: Path, *, cold: bool) -> float:
    """Tokens/s of ``np.load`` of the whole file."""
    if cold:
        evict(path)
    started = time.perf_counter()
    tokens = np.load(path)
    return len(tokens) / (time.perf_counter() - started)


def floor(path: Path, offsets: np.ndarray, out_dir: Path, *, shuffled: bool, warm: bool = False) -> float:
    """Tokens/s of reading every document (one pread each, in a seeded random order or in file order) and writing
    them to a file, fsynced: the I/O a producer cannot avoid (``warm``: after one timed sequential pass)."""
    evict(path)
    started = time.perf_counter()
    if warm:
        with open(path, "rb", buffering=0) as f:
            chunk = bytearray(8 << 20)
            while f.readinto(chunk):
                pass
    warmed = time.perf_counter() - started
    header = int(np.load(path, mmap_mode="r").offset)
    n = len(offsets) - 1
    order = np.random.default_rng(0).permutation(n) if shuffled else np.arange(n)
    starts, stops = offsets[:-1][order].tolist(), offsets[1:][order].tolist()
    buffer = np.empty(32 << 20, dtype=np.uint8).data
    src = os.open(path, os.O_RDONLY)
    fd, out_path = tempfile.mkstemp(dir=out_dir)
    try:
        started = time.perf_counter()
        at = total = 0
        for a, b in zip(starts, stops):
            size = (b - a) * 2
            if at + size > len(buffer):
                os.write(fd, buffer[:at])
                at = 0
            got = os.preadv(src, [buffer[at : at + size]], header + a * 2)
            if got != size:
                raise RuntimeError(f"short read: {got} of {size} bytes")
            at += size
            total += b - a
        os.write(fd, buffer[:at])
        os.fsync(fd)
        return total / (time.perf_counter() - started + warmed)
    finally:
        os.close(src)
        os.close(fd)
        os.unlink(out_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=30_000_000, help="tokens in the corpus (default 30 M)")
    parser.add_argument("--rounds", type=int, default=3, help="cold passes of each; the median is kept (default 3)")
    add_results_arg(parser)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.tokens < 10_000:
        parser.error("need --rounds >= 1 and --tokens >= 10000")
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="tgb-ingest-floor-") as tmp:
        root = Path(tmp)
        path, offsets = make_token_file(root, args.tokens)
        for r in range(args.rounds):
            row = {
                "numpy_disk": numpy_read(path, cold=True),
                "numpy_cache": max(numpy_read(path, cold=False) for _ in range(3)),
                "floor_shuffled": floor(path, offsets, root, shuffled=True),
                "floor_in_order": floor(path, offsets, root, shuffled=False),
                "floor_warmed": floor(path, offsets, root, shuffled=True, warm=True),
            }
            rounds.append(row)
            print(f"round {r}: " + ", ".join(f"{k} {v / 1e6:.0f} M tok/s" for k, v in row.items())
                  + f"; shuffled floor x{row['floor_shuffled'] / row['numpy_disk']:.3f} of numpy's read from disk",
                  flush=True)
    result: dict[str, Any] = {
        "tokens": int(offsets[-1]), "docs": len(offsets) - 1, "rounds": rounds,
        "median_tok_per_s": {k: statistics.median(r[k] for r in rounds) for k in rounds[0]},
        "median_ratio_to_numpy_disk": {k: statistics.median(r[k] / r["numpy_disk"] for r in rounds)
                                       for k in ("floor_shuffled", "floor_in_order", "floor_warmed")},
    }
    save(results_dir(args), "ingest_floor", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
