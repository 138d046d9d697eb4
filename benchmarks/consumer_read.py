"""Consumer read efficiency (BatchWeave §7.4 analogue) and the single-rank hot path.

Three measurements, printed and saved as JSON under benchmarks/results/:

1. ``amplification``: logical world sizes 8/32/128 (Layout(dp=W)) with
   100 KB and 1 MB slices. A sample of ranks (at most ``--ranks`` of them,
   spread over the world, reading concurrently in threads) reads every step
   either with TGB-aware range reads (``RangeReader``: footer + own slice) or
   dense (read the whole TGB object, keep the slice). Reported per mode:
   read amplification (bytes fetched / bytes used), per-rank throughput
   (useful MB/s), P50/P95 per-step fetch latency. Stores: ``LatencyStore``
   (a model: rtt + size/bandwidth per stream over an in-memory namespace) and
   a moto S3 server on loopback (``--s3``; kept small).
2. ``requests``: range requests per rank-step, cold (footers fetched
   batched) and warm (footer cache already holds them).
3. ``hot_path`` (``_hot_path.py``): 16M uint32 tokens in 32x512 batches read
   by 1 and 8 processes through the raw memmap floor, a DataLoader over
   np.memmap, torch_tgb with one TGB per object and torch_tgb with segment
   objects, in the stored dtype and as int64; interleaved rounds, ratios to
   the floor of the same round, p50/p95 per batch.
4. ``remote``: one rank on LatencyStore (20 ms RTT): steady throughput vs the
   store's bandwidth model, requests per rank-step.
5. ``train_wait`` (``_train_wait.py``): how long a training loop with a fixed
   CPU step waits in ``next()`` per step on tgb.DataLoader vs the
   DataLoader-over-memmap baseline, interleaved rounds; ``train_wait_cuda``:
   the same with the step on a GPU and the batches delivered there (run where
   a child process sees CUDA; skipped otherwise).
6. ``ragged`` (``_ragged_read.py``): a VLM-shaped namespace (ragged pixel
   patches + text) read by one rank, bytes/s as a ratio to a raw memmap of the
   same bytes (issue 27: goal >= 0.5).
7. ``labels`` (``_labels_read.py``): a ``write_dataset`` corpus (token rows,
   uint16) delivered as int64 ``input_ids`` + ``labels`` vs the memmap floor
   delivering a slice and its shift (issue 28: goal >= 0.67).

Usage: python benchmarks/consumer_read.py [--quick] [--s3] [--results-dir DIR] [--only SECTION]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from torch_tgb.datapipes import ConsumerStats, FooterIndex, ManifestPoller, Project, RangeReader, merge_stats
from torch_tgb.datapipes.read._types import ReadTask
from torch_tgb.datapipes.read.stats import pipeline_stats
from torch_tgb.format import decode_slice
from torch_tgb.layout import Layout, Mesh, plan_reads
from torch_tgb.manifest import Manifest
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import LatencyStore, RangeRequest, open_store

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, machine, results_dir  # noqa: E402
from _hot_path import hot_path  # noqa: E402  (a sibling module of this script)
from _labels_read import labels_read  # noqa: E402
from _ragged_read import ragged_read  # noqa: E402

SECTIONS = ("amplification", "requests", "hot_path", "remote", "train_wait", "train_wait_cuda", "ragged", "labels")
from _train_wait import train_wait  # noqa: E402

KB = 1000


class DenseReader(RangeReader):
    """Baseline: fetch the whole TGB object, keep this rank's slice."""

    def _read_remote(self, tasks: Sequence[ReadTask]) -> list[list[dict]]:
        return [self._read_pieces(task) for task in tasks]

    def _read_pieces(self, task: ReadTask) -> list[dict]:
        started = time.perf_counter()
        keys = sorted({task.entries[p.tgb].key for p in task.pieces})
        sizes = {e.key: e.entry.size for e in task.entries}
        blobs = dict(zip(keys, self.store.get_ranges([RangeRequest(k, 0, sizes[k]) for k in keys])))
        parts = []
        useful = 0
        for piece in task.pieces:
            key = task.entries[piece.tgb].key
            info = task.footers[task.entries[piece.tgb].address].slice(piece.dp, piece.cp)
            parts.append(decode_slice(blobs[key], info, base_offset=0, verify=self.verify, key=key))
            useful += sum(t.length for t in info.tensors)
        self.stats.fetch_latency(time.perf_counter() - started)
        self.stats.add(data_requests=len(keys), bytes_read=sum(sizes[k] for k in keys), useful_bytes=useful)
        return parts


class SharedLinkStore(LatencyStore):
    """LatencyStore whose streams also share one link of ``link_bandwidth`` bytes/s.

    Every range read reserves ``nbytes / link_bandwidth`` seconds on the link
    (first come, first served), is capped by the per-stream ``bandwidth`` and
    pays ``rtt``: concurrent readers contend, so a reader that fetches W times
    what it needs slows every other one down (the dense-read tail of §7.4).
    The sampled ranks stand for the whole world: the link a sample of ``n``
    of ``W`` ranks sees is ``link_bandwidth * n / W``. A model, not a
    measurement of a real store.
    """

    def __init__(self, inner: Any, *, link_bandwidth: float, **kw: Any) -> None:
        super().__init__(inner, **kw)
        self.link_bandwidth = link_bandwidth
        self._link = threading.Lock()
        self._link_free = 0.0

    def _wait(self, nbytes: int) -> None:
        now = time.monotonic()
        with self._link:
            start = max(now, self._link_free)
            self._link_free = start + nbytes / self.link_bandwidth
            done = self._link_free
        stream = now + (nbytes / self.bandwidth if self.bandwidth else 0.0)
        time.sleep(max(done, stream) - now + self.rtt)


def produce_uniform(store_url: str, world: int, slice_bytes: int, steps: int, options: dict | None = None,
                    config: ProducerConfig = ProducerConfig()) -> None:
    layout = Layout(dp=world)
    with Producer(store_url, producer_id="bench", layout=layout, commit_policy="fixed:8", storage_options=options,
                  config=config) as p:
        for offset in range(steps):
            payload = torch.full((world, slice_bytes), offset % 251, dtype=torch.uint8)
            p.append({"payload": payload}, offset=offset)
        p.flush()
        p.close(seal=True)


def read_ranks(store: Any, world: int, ranks: list[int], *, dense: bool, prefetch: int) -> dict[str, Any]:
    """Ranks read every step concurrently (one thread each); per-rank figures."""
    layout = Layout(dp=world)
    results: dict[int, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            poller = ManifestPoller(Manifest(store))
            project = Project(poller, plan_reads(layout, Mesh(rank, world)))
            footers = FooterIndex(project, store)
            cls = DenseReader if dense else RangeReader
            reader = cls(footers, store, prefetch=prefetch)
            started = time.perf_counter()
            stamps = [time.perf_counter() for _ in reader]
            elapsed = time.perf_counter() - started
            reader.close()
            snap = merge_stats([pipeline_stats(reader), ConsumerStats(steps=len(stamps))])
            steady = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else elapsed
            results[rank] = {"steps": len(stamps), "elapsed_s": elapsed, "step_s": steady, "stats": snap}
        except BaseException as e:  # reported after join
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    snaps = [r["stats"] for r in results.values()]
    useful = sum(s.useful_bytes for s in snaps)
    read = sum(s.bytes_read for s in snaps)
    per_rank_mbps = [r["stats"].useful_bytes / r["elapsed_s"] / 1e6 for r in results.values()]
    steady_mbps = [r["stats"].useful_bytes / r["steps"] / r["step_s"] / 1e6 for r in results.values()]
    return {
        "ranks_sampled": len(ranks),
        "steps": results[ranks[0]]["steps"],
        "read_amplification": read / useful,
        "per_rank_MBps_mean": float(np.mean(per_rank_mbps)),
        "per_rank_MBps_steady": float(np.mean(steady_mbps)),
        "fetch_p50_ms": float(np.median([s.fetch_p50_s for s in snaps]) * 1e3),
        "fetch_p95_ms": float(max(s.fetch_p95_s for s in snaps) * 1e3),
        "requests_per_step": float(np.mean([s.requests_per_step for s in snaps])),
    }


def sample_ranks(world: int, count: int) -> list[int]:
    if count >= world:
        return list(range(world))
    return sorted({int(round(i * (world - 1) / (count - 1))) for i in range(count)})


def amplification(args: argparse.Namespace, s3: Any) -> list[dict[str, Any]]:
    rows = []
    worlds = [8, 32] if args.quick else [8, 32, 128]
    sizes = [100 * KB] if args.quick else [100 * KB, 1000 * KB]
    stores = (["s3"] if s3 is not None else []) + ["latency"]
    for kind in stores:
        for world in worlds:
            for size in sizes:
                if kind == "s3" and world * size > (8 if args.quick else 32) * 1000 * KB:
                    continue  # keep the loopback S3 runs small
                steps = args.steps
                name = f"bench-{kind}-{world}-{size}-{uuid.uuid4().hex[:6]}"
                if kind == "latency":
                    url, options = f"memory://{name}", None
                    produce_uniform(url, world, size, steps)
                    share = len(sample_ranks(world, args.ranks)) / world
                    store = SharedLinkStore(open_store(url), rtt=args.rtt, bandwidth=args.bandwidth,
                                            link_bandwidth=args.link * share)
                else:
                    url, options = s3.namespace(name)
                    produce_uniform(url, world, size, steps, options)
                    store = open_store(url, options)
                ranks = sample_ranks(world, args.ranks)
                for dense in (False, True):
                    r = read_ranks(store, world, ranks, dense=dense, prefetch=2)
                    row = {"store": kind, "world": world, "slice_KB": size // KB, "mode": "dense" if dense else "range", **r}
                    rows.append(row)
                    print(
                        f"{kind:8s} W={world:4d} slice={size // KB:5d}KB {row['mode']:5s}: amp {r['read_amplification']:8.3f}  "
                        f"{r['per_rank_MBps_mean']:8.2f} MB/s/rank ({r['per_rank_MBps_steady']:8.2f} steady)  p50 {r['fetch_p50_ms']:8.1f} ms  p95 {r['fetch_p95_ms']:8.1f} ms",
                        flush=True,
                    )
                store.close()
    return rows


def requests_per_step(args: argparse.Namespace) -> dict[str, float]:
    """Range requests per rank-step on a remote store, cold and warm (footers cached), per object kind.

    ``one``: a streaming producer's default, one TGB per object (a cold step
    reads a footer and a slice); ``segments``: 64 TGBs per segment object,
    whose footers come from the segment index (one tail read per segment).
    """
    steps = 64 if args.quick else 256
    out: dict[str, float] = {"steps": steps}
    for kind, config in (("one", ProducerConfig()), ("segments", ProducerConfig(segment_tgbs=64))):
        url = f"memory://bench-req-{uuid.uuid4().hex[:6]}"
        produce_uniform(url, 8, 10 * KB, steps, config=config)
        store = open_store(url)
        poller = ManifestPoller(Manifest(store))
        footers = FooterIndex(Project(poller, plan_reads(Layout(dp=8), Mesh(3, 8))), store,
                              cache_size=4096)
        reader = RangeReader(footers, store, prefetch=2)
        n = sum(1 for _ in reader)
        cold = pipeline_stats(reader)
        reader.reset(None)
        m = sum(1 for _ in reader)
        warm = pipeline_stats(reader)
        reader.close()
        out[f"{kind}_cold_requests_per_step"] = cold.requests / n
        out[f"{kind}_warm_requests_per_step"] = (warm.requests - cold.requests) / m
        print(f"requests per rank-step ({kind}): cold {out[f'{kind}_cold_requests_per_step']:.3f}, "
              f"warm {out[f'{kind}_warm_requests_per_step']:.3f}", flush=True)
    return out


def remote(args: argparse.Namespace) -> dict[str, Any]:
    """One rank of W=8 on LatencyStore: steady throughput vs the store's model, requests per step.

    Model: ``prefetch`` streams each fetching one slice per round trip, so
    ``prefetch * slice / (rtt + slice / bandwidth)`` bytes/s; footers come
    one batched call per ``footer_lookahead`` steps.
    """
    world, slice_bytes, prefetch = 8, 1000 * KB, 4
    steps = 32 if args.quick else 96
    url = f"memory://bench-remote-{uuid.uuid4().hex[:6]}"
    produce_uniform(url, world, slice_bytes, steps)
    store = LatencyStore(open_store(url), rtt=args.rtt, bandwidth=args.bandwidth)
    r = read_ranks(store, world, [3], dense=False, prefetch=prefetch)
    store.close()
    model = prefetch * slice_bytes / (args.rtt + slice_bytes / args.bandwidth) / 1e6
    out = {"world": world, "slice_KB": slice_bytes // KB, "prefetch": prefetch, "steps": steps,
           "model_MBps": model, "measured_MBps_steady": r["per_rank_MBps_steady"],
           "measured_over_model": r["per_rank_MBps_steady"] / model, "requests_per_step": r["requests_per_step"],
           "fetch_p50_ms": r["fetch_p50_ms"], "fetch_p95_ms": r["fetch_p95_ms"]}
    print(f"remote (LatencyStore rtt={args.rtt * 1e3:.0f} ms, {args.bandwidth / 1e6:.0f} MB/s/stream): "
          f"{out['measured_MBps_steady']:.1f} MB/s/rank steady vs model {model:.1f} "
          f"({out['measured_over_model']:.2f}x), {out['requests_per_step']:.3f} requests/step", flush=True)
    return out


def run_hot_path(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return hot_path(quick=args.quick, rounds=args.rounds, worlds=args.processes, tmp=tmp,
                        log=lambda line: print(line, flush=True))


def run_train_wait(args: argparse.Namespace, device: str = "cpu") -> dict[str, Any] | None:
    if device == "cuda" and not _child_sees_cuda():
        print("train_wait_cuda: no CUDA device in this process's children; skipped", flush=True)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        return train_wait(quick=args.quick, rounds=args.rounds, tmp=tmp, compute_ms=args.compute_ms,
                          log=lambda line: print(line, flush=True), device=device)


def _child_sees_cuda() -> bool:
    """Asked of a child: CUDA initialised here would break the forked loop processes."""
    import subprocess

    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, check=False)
    return probe.stdout.strip() == "True"


def run_ragged(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return ragged_read(quick=args.quick, rounds=args.rounds, tmp=tmp, log=lambda line: print(line, flush=True))


def run_labels(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return labels_read(quick=args.quick, rounds=args.rounds, tmp=tmp, log=lambda line: print(line, flush=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI / a laptop)")
    parser.add_argument("--s3", action="store_true", help="also run on a loopback moto S3 server")
    parser.add_argument("--steps", type=int, default=None, help="TGB steps per namespace")
    parser.add_argument("--ranks", type=int, default=8, help="ranks sampled per world size (threads)")
    parser.add_argument("--rtt", type=float, default=0.020, help="LatencyStore round trip, seconds")
    parser.add_argument("--bandwidth", type=float, default=100e6, help="LatencyStore bytes/s per stream")
    parser.add_argument("--rounds", type=int, default=None, help="hot path: interleaved rounds (default 5, quick 3)")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 8], help="hot path: reader processes")
    parser.add_argument("--only", choices=SECTIONS,
                        default=None)
    parser.add_argument("--compute-ms", type=float, default=5.0,
                        help="train_wait: time of one training step (CPU, or GPU for train_wait_cuda)")
    parser.add_argument("--link", type=float, default=2e9, help="shared link bytes/s for the whole world")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default RESULTS_DIR/consumer_read.json)")
    add_results_arg(parser)
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = results_dir(args) / "consumer_read.json"
    if args.rounds is None:
        args.rounds = 3 if args.quick else 5
    if args.steps is None:
        args.steps = 3 if args.quick else 5
    s3 = None
    if args.s3:
        from torch_tgb.testing.s3server import MotoS3Server

        s3 = MotoS3Server(separate_process=True).start()
    try:
        report = {
            "benchmark": "consumer_read",
            "quick": args.quick,
            "machine": machine(),
            "latency_model": {"rtt_s": args.rtt, "bandwidth_Bps_per_stream": args.bandwidth,
                              "link_Bps_world": args.link, "ranks_sampled": args.ranks},
            "amplification": amplification(args, s3) if args.only in (None, "amplification") else None,
            "requests": requests_per_step(args) if args.only in (None, "requests") else None,
            "hot_path": run_hot_path(args) if args.only in (None, "hot_path") else None,
            "remote": remote(args) if args.only in (None, "remote") else None,
            "train_wait": run_train_wait(args) if args.only in (None, "train_wait") else None,
            "train_wait_cuda": run_train_wait(args, "cuda") if args.only in (None, "train_wait_cuda") else None,
            "ragged": run_ragged(args) if args.only in (None, "ragged") else None,
            "labels": run_labels(args) if args.only in (None, "labels") else None,
        }
    finally:
        if s3 is not None:
            s3.stop()
    # each section says when it ran (a refresh of one section keeps the others' dates)
    ran = {name: report["machine"] for name in SECTIONS if report[name] is not None}
    for name in ran:
        if isinstance(report[name], dict):
            report[name]["machine"] = report["machine"]
    report["sections_run"] = ran
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.only is not None and args.out.exists():  # refresh one section, keep the others
        previous = json.loads(args.out.read_text())
        if report[args.only] is not None:  # a section skipped here (no GPU) keeps its last figures
            previous[args.only] = report[args.only]
        previous["machine"] = report["machine"]
        previous["sections_run"] = {**(previous.get("sections_run") or {}), **ran}
        report = previous
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
