"""Ingest: tokens/s from each source kind into a namespace, against the source library's own read.

One synthetic corpus (uint16 tokens, documents of 50..3000 tokens) is written
as a token file (``.npy`` + raw int64 ``.idx``), Parquet, Lance and
WebDataset tars. For each source and packing (``none``, ``concat``, ``bfd``),
a fresh interpreter times the library's own read of the same data
(``np.load`` of the token file, ``pyarrow.parquet.read_table`` of the
column, Lance ``to_table``, iterating the tars with ``webdataset``) from the
disk (its pages dropped from the page cache first, ``POSIX_FADV_DONTNEED``)
and from the page cache (best of 3), then, after a tiny warm-up write,
drops the pages again and times ``tgb.produce`` over ``document_batches``
(token rows, uint16, segments of 64 MiB) into a fresh local namespace, from
the first read to the sealed manifest (every segment fsynced); then twice more
with the source in the page cache (best of 2), as the library's cached read
(whose CPU use, in cores, is saved too: Arrow decodes on several threads).
``write_dataset`` over the token file (its defaults) is one more point, and
``token-file-units`` the token file read in units of ``UNIT_DOCS`` adjacent
documents (``TokenFile(docs_per_unit=...)``: the order is shuffled by unit, a
unit read as one span) where the default shuffles document by document.
Printed and saved per point: tokens/s from the disk and from the cache, the
ratios to the library's reads (disk to disk, disk to cache, cache to cache),
and bytes at rest per real token (every byte under the namespace's ``data/``).
``--rounds N`` runs every point N times and keeps the medians: of the
rates, and of each round's ratios (a round's ratio is side by side, while the
library's read from the disk moves several-fold between rounds on a VM whose
disk the host serves from its memory at one time and from its disks at
another); the rounds' own figures are saved too. ``--against
DIR`` runs each round a second time with the torch_tgb of another checkout
(e.g. a ``git worktree`` of the commit before a change), interleaved, and
saves both rates and their ratio: a speed-up measured side by side. Issue 28's
goals: >= 50 M tok/s for the token file and >= 0.25x numpy's read of it
(none and bfd), >= 0.3x for Parquet and Lance, <= 1.1x the token width at
rest (2.2 B/token here).

    python benchmarks/ingest.py --quick                # ~1 min on 2 cores
    python benchmarks/ingest.py                        # 30 M tokens
    python benchmarks/ingest.py --rounds 3 --against ../before   # each point 3x, interleaved with ../before
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save

KINDS = ("token-file", "parquet", "lance", "webdataset")
PACKINGS = ("none", "concat", "bfd")
SEQ_LEN = 2048
GLOBAL_BATCH = 64
SEGMENT_BYTES = 64 << 20
#: documents per unit of the ``token-file-units`` point
UNIT_DOCS = 64


def token_corpus(num_tokens: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, offsets)``: about ``num_tokens`` uint16 ids of a 50k vocabulary in documents of 50-3000 tokens."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 3001, size=num_tokens // 1525 + 1)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return rng.integers(0, 50_000, size=int(offsets[-1]), dtype=np.uint16), offsets


def make_corpus(root: Path, num_tokens: int, seed: int = 0) -> dict[str, Any]:
    """The same documents in every format; returns their paths and the corpus size."""
    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset as wds

    tokens, offsets = token_corpus(num_tokens, seed)
    lengths = np.diff(offsets)
    np.save(root / "corpus.npy", tokens)
    offsets.tofile(root / "corpus.idx")  # raw int64, the Megatron-style index
    values = pa.array(tokens)
    column = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)
    table = pa.table({"input_ids": column})
    (root / "parquet").mkdir()
    bounds = np.linspace(0, len(lengths), 5).astype(int)
    for f in range(4):
        pq.write_table(table.slice(bounds[f], bounds[f + 1] - bounds[f]), str(root / "parquet" / f"part-{f}.parquet"),
                       row_group_size=2048)
    lance.write_dataset(table, str(root / "corpus.lance"), max_rows_per_file=8192)
    (root / "tars").mkdir()
    per_tar = max(1, len(lengths) // 8)
    for start in range(0, len(lengths), per_tar):
        with wds.TarWriter(str(root / "tars" / f"shard-{start // per_tar:04d}.tar")) as sink:
            for k in range(start, min(start + per_tar, len(lengths))):
                sink.write({"__key__": f"d{k:08d}", "tokens.npy": tokens[offsets[k] : offsets[k + 1]]})
    return {"docs": len(lengths), "tokens": int(offsets[-1]), "width": 2}


# --- in the worker: the library's own read, then tgb ------------------------------------------


def library_read(kind: str, root: Path) -> int:
    """Read the corpus with the format's own library; returns tokens read (the work timed)."""
    if kind == "token-file":
        return int(np.load(root / "corpus.npy").size)
    if kind == "parquet":
        import pyarrow.parquet as pq

        column = pq.read_table(root / "parquet", columns=["input_ids"]).column(0)
        return sum(len(chunk.values) for chunk in column.chunks)
    if kind == "lance":
        import lance

        column = lance.dataset(str(root / "corpus.lance")).to_table(columns=["input_ids"]).column(0)
        return sum(len(chunk.values) for chunk in column.chunks)
    import webdataset as wds

    tars = sorted(str(p) for p in (root / "tars").glob("*.tar"))
    return sum(int(sample["tokens.npy"].size) for sample in wds.WebDataset(tars, shardshuffle=False).decode())


def files_of(kind: str, root: Path) -> list[Path]:
    where = {"token-file": [root / "corpus.npy", root / "corpus.idx"], "parquet": [root / "parquet"],
             "lance": [root / "corpus.lance"], "webdataset": [root / "tars"]}[kind]
    return [f for p in where for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]


def evict(kind: str, root: Path) -> None:
    """Drop the source's pages from the page cache: the next read comes from the disk."""
    for path in files_of(kind, root):
        evict_file(path)


def evict_file(path: Path) -> None:
    """Drop ``path``'s pages from the page cache (written back first): the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed_reads(kind: str, root: Path) -> dict[str, float]:
    """The library's read from the disk (page cache dropped first) and from the page cache (best of 3)."""
    library_read(kind, root)  # imports and first calls are not the read
    evict(kind, root)
    t = time.perf_counter()
    tokens = library_read(kind, root)
    cold = time.perf_counter() - t
    warm = []
    for _ in range(3):
        t, cpu = time.perf_counter(), time.process_time()
        library_read(kind, root)
        warm.append((time.perf_counter() - t, time.process_time() - cpu))
    best = min(warm)
    return {"tokens": tokens, "cold_s": cold, "warm_s": best[0], "warm_cores": best[1] / best[0]}


def source(kind: str, root: Path) -> Any:
    from torch_tgb import sources

    if kind == "token-file":
        return sources.TokenFile(root / "corpus.npy", offsets=root / "corpus.idx")
    if kind == "token-file-units":
        return sources.TokenFile(root / "corpus.npy", offsets=root / "corpus.idx", docs_per_unit=UNIT_DOCS)
    if kind == "parquet":
        return sources.Parquet(root / "parquet", column="input_ids")
    if kind == "lance":
        return sources.Lance(root / "corpus.lance", column="input_ids")
    return sources.WebDataset(sorted(str(p) for p in (root / "tars").glob("*.tar")))


def data_bytes(ns: Path) -> int:
    return sum(f.stat().st_size for f in (ns / "data").rglob("*") if f.is_file())


def warm_up(work: str) -> None:
    """One tiny write first: imports and first calls are not per-token work."""
    import torch_tgb as tgb

    tiny = np.arange(5000, dtype=np.uint16)
    tgb.write_dataset(tempfile.mkdtemp(prefix="tgb-ingest-warm-", dir=work), (tiny, np.array([0, 2500, 5000])),
                      layout=tgb.Layout(dp=1), seq_len=64, global_batch_size=4, progress=False)


def use_tree(tree: str | None) -> None:
    """Import torch_tgb from checkout ``tree`` (its root) instead of the installed one: set up before any import."""
    if not tree:
        return
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # an editable install's finder
    sys.path.insert(0, os.path.abspath(tree))


def worker(args: argparse.Namespace) -> None:
    """One point, in a fresh interpreter: prints one JSON line."""
    import torch

    import torch_tgb as tgb
    from torch_tgb.datapipes import document_batches
    from torch_tgb.producer import ProducerConfig

    root = Path(args.root)
    files = "token-file" if args.kind == "token-file-units" else args.kind  # the same file, read by units
    reads = timed_reads(files, root)
    warm_up(args.work)

    def produce(ns: Path) -> float:
        started = time.perf_counter()
        docs = source(args.kind, root)
        batches = document_batches(docs, seq_len=SEQ_LEN, global_batch_size=GLOBAL_BATCH, packing=args.packing,
                                   token_dtype=torch.uint16)
        tgb.produce(str(ns), batches, producer_id="p0", commit_policy=f"fixed:{args.commit_every}", seal=True,
                    config=ProducerConfig.bulk(SEGMENT_BYTES), progress=False)
        return time.perf_counter() - started

    print(json.dumps({**reads, **_timed_cold_and_cached(produce, lambda: evict(files, root), args.work)}))


def run_worker(kind: str, packing: str, root: Path, work: Path, commit_every: int, tree: str | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", "--kind", kind, "--packing", packing, "--root", str(root),
           "--work", str(work), "--commit-every", str(commit_every), *(["--tree", tree] if tree else [])]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"{kind}/{packing} failed ({done.returncode}): {done.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def run_point(kind: str, packing: str, root: Path, work: Path, commit_every: int, rounds: int = 1,
              against: str | None = None) -> dict[str, Any]:
    """``rounds`` runs of the point (each followed by one with ``against``'s torch_tgb): the median run's figures."""
    runs, others = [], []
    for _ in range(rounds):
        runs.append(run_worker(kind, packing, root, work, commit_every, None))
        if against:
            others.append(run_worker(kind, packing, root, work, commit_every, against))
    out = sorted(runs, key=lambda r: r["tgb_s"])[(len(runs) - 1) // 2]  # a middle run: its bytes, RSS and cores
    rate = {k: [r["tokens"] / r[k] for r in runs] for k in ("tgb_s", "tgb_cached_s", "cold_s", "warm_s")}
    cold, warm = float(np.median(rate["cold_s"])), float(np.median(rate["warm_s"]))
    tgb_rate = float(np.median(rate["tgb_s"]))  # as the other tree's: the median rate
    cached_rate = float(np.median(rate["tgb_cached_s"]))
    # each round's ratio is side by side (the same process, minutes apart); the library's read from the disk moves
    # several-fold between rounds on a VM, so the ratio kept is the median of the rounds' ratios
    ratios = {name: [a / b for a, b in zip(rate[num], rate[den])]
              for name, num, den in (("disk", "tgb_s", "cold_s"), ("cached", "tgb_s", "warm_s"),
                                     ("cached_cached", "tgb_cached_s", "warm_s"))}
    compared: dict[str, Any] = {}
    if others:
        other = float(np.median([r["tokens"] / r["tgb_s"] for r in others]))
        compared = {"against_tok_per_s": round(other), "speedup": round(tgb_rate / other, 3),
                    "rounds_tok_per_s": [round(x) for x in rate["tgb_s"]],
                    "against_rounds_tok_per_s": [round(r["tokens"] / r["tgb_s"]) for r in others]}
    elif rounds > 1:
        compared = {"rounds_tok_per_s": [round(x) for x in rate["tgb_s"]]}
    if rounds > 1:
        compared.update(rounds_library_read_disk_tok_per_s=[round(x) for x in rate["cold_s"]],
                        rounds_ratio_to_disk_read=[round(x, 4) for x in ratios["disk"]])
    return {
        "source": kind,
        "packing": packing,
        "tokens": out["tokens"],
        "library_read_disk_tok_per_s": round(cold),
        "library_read_cached_tok_per_s": round(warm),
        "tgb_tok_per_s": round(tgb_rate),
        "ratio_to_disk_read": round(float(np.median(ratios["disk"])), 4),
        "ratio_to_cached_read": round(float(np.median(ratios["cached"])), 4),
        # like for like: tgb with the source in the page cache against the library's read from the cache
        "tgb_cached_tok_per_s": round(cached_rate),
        "cached_ratio_to_cached_read": round(float(np.median(ratios["cached_cached"])), 4),
        "library_read_cached_cores": round(out["warm_cores"], 2),
        "bytes_per_token": round(out["data_bytes"] / out["tokens"], 3),
        "tgb_s": round(out["tokens"] / tgb_rate, 3),
        "peak_rss_mb": round(out["peak_rss"] / 2**20, 1),
        "rounds": rounds,
        **compared,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small corpus (3 M tokens), packing none and bfd")
    parser.add_argument("--tokens", type=int, default=30_000_000, help="tokens in the corpus (default 30 M)")
    parser.add_argument("--sources", default=",".join(KINDS), help=f"comma-separated subset of {', '.join(KINDS)}")
    parser.add_argument("--packings", default=None, help="comma-separated subset of none,concat,bfd (default all)")
    parser.add_argument("--commit-every", type=int, default=64, help="batches per manifest commit (default 64)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per point; the median is kept (default 1)")
    parser.add_argument("--against", default=None,
                        help="another checkout's root: each round also runs with its torch_tgb, interleaved")
    add_results_arg(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("kind", "packing", "root", "work", "tree"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.against and not (Path(args.against) / "torch_tgb" / "__init__.py").is_file():
        parser.error(f"--against {args.against}: not a checkout of torch_tgb (no torch_tgb/__init__.py there)")
    if args.worker:
        use_tree(args.tree)
        (write_dataset_worker if args.kind == "write_dataset" else worker)(args)
        return 0
    num_tokens = 3_000_000 if args.quick else args.tokens
    kinds = [k for k in args.sources.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown sources {sorted(unknown)}; choose from {', '.join(KINDS)}")
    packings = (args.packings or ("none,bfd" if args.quick else ",".join(PACKINGS))).split(",")
    points = []
    with tempfile.TemporaryDirectory(prefix="tgb-ingest-") as tmp:
        work = Path(tmp)
        (work / "corpus").mkdir()
        print(f"writing a corpus of {num_tokens / 1e6:.0f} M tokens in {len(kinds)} formats ...", file=sys.stderr)
        corpus = make_corpus(work / "corpus", num_tokens)
        plan = [(k, p) for k in kinds for p in packings]
        if "token-file" in kinds:
            plan += [("token-file-units", p) for p in packings if p != "concat"]
            plan += [("write_dataset", p) for p in packings if p != "concat"]
        for kind, packing in plan:
            point = run_point(kind, packing, work / "corpus", work, args.commit_every, args.rounds, args.against)
            points.append(point)
            print(
                f"{kind:>13} {packing:>6}: tgb {point['tgb_tok_per_s'] / 1e6:6.1f} M tok/s; library read "
                f"{point['library_read_disk_tok_per_s'] / 1e6:7.1f} M tok/s from disk (x{point['ratio_to_disk_read']:.3f}), "
                f"{point['library_read_cached_tok_per_s'] / 1e6:7.1f} cached (x{point['ratio_to_cached_read']:.3f}); "
                f"tgb from cache {point['tgb_cached_tok_per_s'] / 1e6:.1f} (x{point['cached_ratio_to_cached_read']:.3f} "
                f"of the cached read, {point['library_read_cached_cores']:.1f} cores); "
                f"{point['bytes_per_token']:.3f} B/token at rest, peak RSS {point['peak_rss_mb']:.0f} MiB"
                + (f"; against {point['against_tok_per_s'] / 1e6:.1f} M tok/s (x{point['speedup']:.2f})"
                   if "speedup" in point else "")
            )
    report = {
        "quick": bool(args.quick),
        "corpus": corpus,
        "seq_len": SEQ_LEN,
        "global_batch": GLOBAL_BATCH,
        "segment_bytes": SEGMENT_BYTES,
        "rounds": args.rounds,
        "against": None if not args.against else {"dir": os.path.abspath(args.against), "commit": _commit(args.against)},
        "points": points,
    }
    save(results_dir(args), "ingest_quick" if args.quick else "ingest", report)
    return 0


def _commit(tree: str) -> str | None:
    done = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def write_dataset_worker(args: argparse.Namespace) -> None:
    """``write_dataset`` over the token file (its defaults: token rows at the corpus width, segments)."""
    import torch_tgb as tgb

    root = Path(args.root)
    reads = timed_reads("token-file", root)
    warm_up(args.work)

    def write(ns: Path) -> float:
        started = time.perf_counter()
        corpus = np.load(root / "corpus.npy", mmap_mode="r")
        offsets = np.fromfile(root / "corpus.idx", dtype=np.int64)
        tgb.write_dataset(str(ns), (corpus, offsets), layout=tgb.Layout(dp=1), seq_len=SEQ_LEN,
                          global_batch_size=GLOBAL_BATCH, packing=args.packing, progress=False)
        return time.perf_counter() - started

    print(json.dumps({**reads, **_timed_cold_and_cached(write, lambda: evict("token-file", root), args.work)}))


def _timed_cold_and_cached(
    write: Callable[[Path], float], evict_source: Callable[[], None], work: str
) -> dict[str, float]:
    """``write`` into a fresh namespace from the disk (the source evicted first), then best of 2 from the cache."""
    ns = Path(tempfile.mkdtemp(prefix="tgb-ingest-ns-", dir=work))
    evict_source()
    seconds = write(ns)
    stored = data_bytes(ns)
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    shutil.rmtree(ns)
    cached = []  # the source's pages are in the page cache now, as for the library's cached read
    for _ in range(2):
        again = Path(tempfile.mkdtemp(prefix="tgb-ingest-ns-", dir=work))
        cached.append(write(again))
        shutil.rmtree(again)
    return {"tgb_s": seconds, "tgb_cached_s": min(cached), "data_bytes": stored, "peak_rss": peak}


if __name__ == "__main__":
    raise SystemExit(main())
