"""Ingest: documents/s and MB/s from each source kind into a namespace, with 1 and 2 producer processes.

For each source (token file, WebDataset tars, Parquet, Lance) holding the same
synthetic corpus (uint16 tokens, documents of 50..2000 tokens), P producer
processes (fresh interpreters) each run ``tgb.produce`` over shard i/P of the
source -> BFD packing -> global batches into one local namespace. Reported
per (source, P): documents/s and source MB/s (token bytes as stored, uint16)
over the wall time of the slowest producer (from its start, imports excluded),
MB/s written to the namespace, and the peak RSS of the largest producer.
Results JSON (with a machine description) goes to ``--results-dir``.

    python benchmarks/ingest.py --quick                # ~1 min on 2 cores
    python benchmarks/ingest.py --docs 40000           # the full run
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save  # noqa: E402
KINDS = ("token-file", "webdataset", "parquet", "lance")
SEQ_LEN = 2048
GLOBAL_BATCH = 16


def make_corpus(root: Path, num_docs: int, seed: int = 0) -> dict[str, Any]:
    """The same documents in every format; returns the --source spec of each and the corpus size."""
    import lance
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset as wds

    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 2001, size=num_docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(0, 50_000, size=int(offsets[-1]), dtype=np.uint16)
    np.save(root / "tokens.npy", tokens)
    np.save(root / "offsets.npy", offsets)
    docs = [tokens[offsets[i] : offsets[i + 1]] for i in range(num_docs)]
    tars = []
    per_tar = max(1, num_docs // 16)
    for start in range(0, num_docs, per_tar):
        path = root / f"shard-{start // per_tar:04d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for k in range(start, min(start + per_tar, num_docs)):
                sink.write({"__key__": f"d{k:08d}", "tokens.npy": docs[k]})
        tars.append(str(path))
    table = pa.table({"input_ids": pa.array([d.tolist() for d in docs], pa.list_(pa.uint16()))})
    (root / "parquet").mkdir()
    bounds = np.linspace(0, num_docs, 5).astype(int)
    for f in range(4):
        pq.write_table(table.slice(bounds[f], bounds[f + 1] - bounds[f]), str(root / "parquet" / f"part-{f}.parquet"),
                       row_group_size=max(1, num_docs // 32))
    lance.write_dataset(table, str(root / "corpus.lance"), max_rows_per_file=max(1, num_docs // 16))
    return {
        "specs": {
            "token-file": (f"token-file:{root / 'tokens.npy'}", {"offsets": str(root / "offsets.npy")}),
            "webdataset": ("webdataset:" + ",".join(tars), {}),
            "parquet": (f"parquet:{root / 'parquet'}", {"column": "input_ids"}),
            "lance": (f"lance:{root / 'corpus.lance'}", {"column": "input_ids"}),
        },
        "docs": num_docs,
        "tokens": int(offsets[-1]),
        "source_bytes": int(offsets[-1]) * 2,
    }


def worker(args: argparse.Namespace) -> None:
    """One producer: shard ``args.index`` of ``args.count``; prints one JSON line."""
    import torch

    from torch_tgb.cli._produce_source import open_source
    from torch_tgb.layout import Layout
    from torch_tgb.offline._stream import document_batches
    from torch_tgb.producer import produce

    started = time.perf_counter()
    ns_args = argparse.Namespace(source=args.source, offsets=args.offsets, column=args.column, text_field=None,
                                 tokenizer=None, seed=0, dtype="uint16")
    docs = open_source(ns_args, (args.index, args.count))
    layout = Layout(dp=2, seq_keys=("input_ids", "labels", "document_ids", "position_ids"))
    pipeline = document_batches(docs, seq_len=SEQ_LEN, global_batch_size=GLOBAL_BATCH, packing="bfd",
                                token_dtype=torch.int32)
    report = produce(args.ns, pipeline, producer_id=f"p{args.index}", layout=layout, progress=False)
    seconds = time.perf_counter() - started
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    print(json.dumps({
        "docs": docs.stats().records, "tokens": docs.stats().tokens, "batches": report.batches,
        "bytes_written": report.bytes_written, "seconds": seconds, "peak_rss": peak,
    }))


def run_point(kind: str, spec: tuple[str, dict[str, str]], producers: int, work: Path) -> dict[str, Any]:
    ns = work / f"ns-{kind}-{producers}"
    source, extra = spec
    procs = []
    for i in range(producers):
        cmd = [sys.executable, __file__, "--worker", "--ns", str(ns), "--source", source, "--index", str(i),
               "--count", str(producers)]
        for key, value in extra.items():
            cmd += [f"--{key}", value]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode:
            raise RuntimeError(f"{kind} producer failed ({p.returncode}): {err[-2000:]}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    shutil.rmtree(ns, ignore_errors=True)
    wall = max(o["seconds"] for o in outs)
    return {
        "source": kind,
        "producers": producers,
        "docs": sum(o["docs"] for o in outs),
        "tokens": sum(o["tokens"] for o in outs),
        "batches": sum(o["batches"] for o in outs),
        "seconds": round(wall, 3),
        "docs_per_s": round(sum(o["docs"] for o in outs) / wall, 1),
        "source_mb_per_s": round(sum(o["tokens"] for o in outs) * 2 / wall / 1e6, 2),
        "written_mb_per_s": round(sum(o["bytes_written"] for o in outs) / wall / 1e6, 2),
        "peak_rss_mb": round(max(o["peak_rss"] for o in outs) / 2**20, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small corpus (2 000 documents)")
    parser.add_argument("--docs", type=int, default=20_000, help="documents in the corpus (default 20 000)")
    parser.add_argument("--sources", default=",".join(KINDS), help=f"comma-separated subset of {', '.join(KINDS)}")
    parser.add_argument("--producers", default="1,2", help="producer counts to run (default 1,2)")
    add_results_arg(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("ns", "source", "offsets", "column"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    num_docs = 2_000 if args.quick else args.docs
    kinds = [k for k in args.sources.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown sources {sorted(unknown)}; choose from {', '.join(KINDS)}")
    counts = [int(p) for p in args.producers.split(",")]
    points = []
    with tempfile.TemporaryDirectory(prefix="tgb-ingest-") as tmp:
        work = Path(tmp)
        print(f"writing a corpus of {num_docs} documents in {len(kinds)} formats ...", file=sys.stderr)
        corpus = make_corpus(work, num_docs)
        for kind in kinds:
            for producers in counts:
                point = run_point(kind, corpus["specs"][kind], producers, work)
                assert point["docs"] == num_docs, point
                points.append(point)
                print(
                    f"{kind:>10} x{producers}: {point['docs_per_s']:>9.0f} docs/s {point['source_mb_per_s']:>7.1f} MB/s "
                    f"source, {point['written_mb_per_s']:>7.1f} MB/s written, peak RSS {point['peak_rss_mb']:.0f} MiB "
                    f"({point['seconds']:.1f} s)"
                )
    report = {
        "quick": bool(args.quick),
        "corpus": {k: corpus[k] for k in ("docs", "tokens", "source_bytes")},
        "seq_len": SEQ_LEN,
        "global_batch": GLOBAL_BATCH,
        "points": points,
    }
    save(results_dir(args), "ingest_quick" if args.quick else "ingest", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
