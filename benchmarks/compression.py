"""Compression at rest: bytes at rest and reader steps/s, compressed vs not, side by side in one run (issue 48).

**Namespaces** (each written twice from the same batches: ``plain``, and
``coded`` with ``Producer(codecs=...)``; layout dp=1, bulk segments):

- ``image``: the ``skimage.data`` photographs (real photos shipped with
  scikit-image), a random crop of each resized to ``--res`` square, patchified
  (14 px, 2x2 merge: ``pixel_values`` [1024, 588] uint8 per image at 448) with
  ``image_grid_thw`` and 256 token ids per row; ``--images`` rows a step.
  Codec: ``zstd:1+delta:3x14x14`` (a patch's 3 colour planes of 14x14).
- ``video``: clips panning across those photographs (16 frames at 224),
  encoded with PyAV (H.264 when the build has it, else MPEG-4 part 2) and
  decoded back, patchified with ``temporal_patch=2`` ([2048, 1176] per clip).
  Codec: ``zstd:1+delta:3x2x14x14``.
- ``tokens``: uint16 token rows ([16, 2048] a step) of real text (the package
  descriptions of the installed packages and this repository's docs),
  tokenized by a byte-level BPE of 32,000 tokens trained on them
  (``tokenizers``; Zipf-distributed ids where it is missing). Codec: ``zstd``.

**Codecs on one step's tensor** (``codecs``): ratio, and encode and decode MB
per CPU second (``time.thread_time``: what the work costs, whatever else runs
on the machine) of zstd 1/3, with and without the delta filter, and lz4 (+ the
same delta) when the ``lz4`` package is installed: the measurement behind "lz4
if it wins".

**Reader** (rounds interleaved, plain and coded alternating; medians):

- ``alone``: steps/s of ``tgb.TGBDataset`` over the sealed namespace and
  nothing else, and the process's CPU ms per step (all threads): the reader's
  own cost, the coded one decoding every byte;
- ``trainer``: the end-to-end benchmark's setting, the trainer on its own
  core: the main thread pinned to core T runs a training step of
  ``--step-ms`` CPU milliseconds (float matmuls, one thread; default 55 ms,
  the tiny VLM's step at 448 in ``end_to_end.json``) on each batch, and the
  reader's read-ahead threads are pinned to core R. A plain local namespace
  is read inline on T (the default run path: views of a mapping), a coded one
  ahead on R. Goal: coded >= 0.9x plain steps/s. Recorded with it: the
  trainer's wait for each batch (the reader's share of a step) and its step's
  wall and CPU ms (on a machine shared with other jobs a step's wall time
  stretches beyond its CPU time whatever the reader does).

Goals: >= 2x fewer bytes at rest on ``image`` and ``video``; ``trainer``
steps/s coded >= 0.9x plain. The machine's load is recorded: on a shared
2-core VM the figures move with other jobs.

Run:  python benchmarks/compression.py            (3 rounds)
      python benchmarks/compression.py --quick    (2 rounds, fewer steps)
Writes compression.json into --results-dir (default ./tgb-bench-results).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import torch_tgb as tgb
from torch_tgb.producer import ProducerConfig

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, interleave, results_dir, save, spread  # noqa: E402
from _compression_data import image_batches, text_tokens, token_batches, video_batches  # noqa: E402

CODECS = {
    "image": {"pixel_values": "zstd:1+delta:3x14x14"},
    "video": {"pixel_values_videos": "zstd:1+delta:3x2x14x14"},
    "tokens": {"input_ids": "zstd"},
}


# --- writing ------------------------------------------------------------------


def write(ns: str, batches: list[dict[str, Any]], codecs: dict[str, str] | None) -> dict[str, float]:
    started = time.perf_counter()
    with tgb.Producer(ns, producer_id="p", layout=tgb.Layout(dp=1), codecs=codecs,
                      config=ProducerConfig.bulk()) as p:
        for offset, batch in enumerate(batches):
            p.append(batch, offset=offset)
        p.close(seal=True)
    seconds = time.perf_counter() - started
    data = Path(ns) / "data"
    size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    return {"bytes": size, "bytes_per_step": size / len(batches), "write_s_per_step": seconds / len(batches)}


# --- codecs on one tensor ---------------------------------------------------------


def codec_table(array: np.ndarray, block: tuple[int, ...] | None) -> dict[str, dict[str, float]]:
    """Ratio and MB/s of each codec candidate on ``array`` (one step's tensor)."""
    from torch_tgb.format import parse_codec

    out: dict[str, dict[str, float]] = {}
    candidates = ["zstd:1", "zstd"] + ([] if block is None else [f"zstd:1+delta:{'x'.join(map(str, block))}",
                                                                  f"zstd+delta:{'x'.join(map(str, block))}"])
    raw = array.nbytes
    for spec in candidates:
        codec = parse_codec(spec)
        t0 = time.thread_time()  # CPU seconds of this thread: what the work costs, whatever else runs
        stored = codec.encode(array)
        t1 = time.thread_time()
        dst = bytearray(raw)
        for _ in range(3):
            codec.decode_into(memoryview(stored), memoryview(dst), dtype=array.dtype, shape=array.shape, where="bench")
        t2 = time.thread_time()
        assert bytes(dst) == array.tobytes()
        out[spec] = {"ratio": raw / len(stored), "encode_mb_s": raw / (t1 - t0) / 1e6,
                     "decode_mb_s": 3 * raw / (t2 - t1) / 1e6}
    try:
        import lz4.block
    except ImportError:
        out["lz4"] = {"note": "lz4 is not installed"}  # type: ignore[dict-item]
        return out
    from torch_tgb.format._delta import delta_decode, delta_encode

    for name, filt in [("lz4", None), ("lz4+delta", block)]:
        if name == "lz4+delta" and block is None:
            continue
        work = np.array(array, copy=True)
        t0 = time.thread_time()
        if filt is not None:
            delta_encode(work, filt)
        stored = lz4.block.compress(work.tobytes(), store_size=False)
        t1 = time.thread_time()
        for _ in range(3):
            back = np.frombuffer(bytearray(lz4.block.decompress(stored, uncompressed_size=raw)),
                                 dtype=array.dtype).reshape(array.shape)
            if filt is not None:
                delta_decode(back, filt)
        t2 = time.thread_time()
        assert np.array_equal(back, array)
        out[name] = {"ratio": raw / len(stored), "encode_mb_s": raw / (t1 - t0) / 1e6,
                     "decode_mb_s": 3 * raw / (t2 - t1) / 1e6}
    return out


# --- reading ------------------------------------------------------------------


def calibrate_step(ms: float) -> Callable[[], None]:
    """A training step of about ``ms`` CPU milliseconds on this thread: float matmuls, one torch thread."""
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def work(n: int) -> None:
        for _ in range(n):
            torch.mm(a, b)

    work(20)
    t0 = time.thread_time()  # CPU time: on a loaded machine wall time would calibrate a shorter step
    work(200)
    per = (time.thread_time() - t0) / 200
    n = max(1, round(ms / 1000 / per))
    return lambda: work(n)


def read_run(ns: str, *, trainer: Callable[[], None] | None, cores: tuple[int, int] | None) -> dict[str, float]:
    """Steps/s of one pass over ``ns`` (after two untimed steps), with or without a trainer step per batch."""
    it = iter(tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=0, dp_size=1)))
    n = 0
    waited = trained = trained_cpu = 0.0
    for _ in range(2):  # not timed; the second starts the read-ahead threads (a RangeReader reads its first inline)
        next(it)
    if cores is not None:
        _pin(trainer_core=cores[0], reader_core=cores[1])
    started, cpu = time.perf_counter(), time.process_time()  # CPU of every thread of the process
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        waited += time.perf_counter() - t0
        n += 1
        if trainer is not None:
            t1, c1 = time.perf_counter(), time.thread_time()
            for v in batch.values():
                float(v[:1].float().sum())  # the step touches its data
            trainer()
            trained += time.perf_counter() - t1
            trained_cpu += time.thread_time() - c1
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if cores is not None:
        os.sched_setaffinity(0, set(cores))
    per = 1000 / max(1, n)
    # a step's wall time is the trainer's wait plus its step: on a machine shared with other jobs the step's
    # wall time stretches beyond its CPU time (train_ms vs train_cpu_ms) whatever the reader does
    return {"steps_per_s": n / seconds, "wait_ms_per_step": waited * per, "steps": n, "cpu_ms_per_step": cpu * per,
            "train_ms_per_step": trained * per, "train_cpu_ms_per_step": trained_cpu * per}


def _pin(*, trainer_core: int, reader_core: int) -> None:
    """This (the trainer's) thread on ``trainer_core``, every other thread of the process (the reader's, and
    the threads they start later, which inherit it) on ``reader_core``."""
    me = threading.get_native_id()
    for tid in (int(t) for t in os.listdir("/proc/self/task")):
        if tid != me:
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(tid, {reader_core})
    os.sched_setaffinity(0, {trainer_core})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--res", type=int, default=448, help="image side (default 448)")
    parser.add_argument("--images", type=int, default=8, help="images per step (default 8)")
    parser.add_argument("--step-ms", type=float, default=55.0, help="the trainer's step in CPU ms (default 55)")
    add_results_arg(parser)
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    steps = {"image": 12 if args.quick else 24, "video": 8 if args.quick else 16, "tokens": 24 if args.quick else 48}
    torch.set_num_threads(1)
    cpus = sorted(os.sched_getaffinity(0))
    cores = (cpus[0], cpus[-1]) if len(cpus) > 1 else None
    work = Path(tempfile.mkdtemp(prefix="tgb-compress-"))
    result: dict[str, Any] = {"config": {"rounds": rounds, "res": args.res, "images": args.images,
                                         "step_ms": args.step_ms, "steps": steps, "codecs": CODECS,
                                         "cores": {"trainer": None if cores is None else cores[0],
                                                   "reader": None if cores is None else cores[1]}},
                              "load_before": list(os.getloadavg())}
    try:
        ids, text = text_tokens(steps["tokens"] * 16 * 2048)
        result["config"]["text"] = text
        data = {
            "image": list(image_batches(steps["image"], args.images, args.res)),
            "video": list(video_batches(steps["video"], 2)),
            "tokens": list(token_batches(steps["tokens"], ids)),
        }
        blocks = {"image": (3, 14, 14), "video": (3, 2, 14, 14), "tokens": None}
        at_rest: dict[str, Any] = {}
        codecs_measured: dict[str, Any] = {}
        for kind, batches in data.items():
            plain = write(str(work / f"{kind}-plain"), batches, None)
            coded = write(str(work / f"{kind}-coded"), batches, CODECS[kind])
            at_rest[kind] = {"plain": plain, "coded": coded, "ratio": plain["bytes"] / coded["bytes"]}
            key = next(iter(CODECS[kind]))
            value = batches[0][key]
            array = (torch.cat(value) if isinstance(value, list) else value).numpy()
            codecs_measured[kind] = codec_table(array, blocks[kind])
            print(f"{kind}: {plain['bytes'] / 2**20:.1f} MiB plain, {coded['bytes'] / 2**20:.1f} MiB coded: "
                  f"{at_rest[kind]['ratio']:.2f}x fewer bytes at rest", flush=True)
        result["at_rest"] = at_rest
        result["codecs"] = codecs_measured
        trainer = calibrate_step(args.step_ms)
        runs: dict[str, Callable[[], dict[str, float]]] = {}
        for kind in data:
            for which in ("plain", "coded"):
                ns = str(work / f"{kind}-{which}")
                runs[f"{kind}/{which}/alone"] = functools.partial(read_run, ns, trainer=None, cores=None)
                runs[f"{kind}/{which}/trainer"] = functools.partial(read_run, ns, trainer=trainer, cores=cores)
        measured = interleave(runs, rounds)
        reader: dict[str, Any] = {}
        for name, values in measured.items():
            kind, which, mode = name.split("/")
            reader.setdefault(kind, {}).setdefault(mode, {})[which] = {
                "steps_per_s": spread([v["steps_per_s"] for v in values]),
                "wait_ms_per_step": spread([v["wait_ms_per_step"] for v in values]),
                **{f: spread([v[f] for v in values]) for f in ("cpu_ms_per_step", "train_ms_per_step",
                                                                 "train_cpu_ms_per_step")},
            }
        for kind, modes in reader.items():
            for mode, pair in modes.items():
                pair["coded_over_plain"] = (pair["coded"]["steps_per_s"]["median"]
                                            / pair["plain"]["steps_per_s"]["median"])
        result["reader"] = reader
        result["load_after"] = list(os.getloadavg())
        result["goals"] = {
            "bytes_2x_image": at_rest["image"]["ratio"] >= 2.0,
            "bytes_2x_video": at_rest["video"]["ratio"] >= 2.0,
            "trainer_0_9x_image": reader["image"]["trainer"]["coded_over_plain"] >= 0.9,
            "trainer_0_9x_video": reader["video"]["trainer"]["coded_over_plain"] >= 0.9,
        }
        _print(result)
        save(results_dir(args), "compression", result)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _print(result: dict[str, Any]) -> None:
    print("\nbytes at rest (MiB)            plain    coded   ratio   write ms/step plain/coded")
    for kind, r in result["at_rest"].items():
        print(f"  {kind:<28}{r['plain']['bytes'] / 2**20:8.1f} {r['coded']['bytes'] / 2**20:8.1f} "
              f"{r['ratio']:7.2f}   {1000 * r['plain']['write_s_per_step']:7.1f} / "
              f"{1000 * r['coded']['write_s_per_step']:.1f}")
    print("\ncodecs on one step's tensor    ratio  encode and decode MB per CPU second")
    for kind, table in result["codecs"].items():
        for spec, r in table.items():
            if "ratio" in r:
                print(f"  {kind:<7}{spec:<23}{r['ratio']:6.2f} {r['encode_mb_s']:11.0f} {r['decode_mb_s']:12.0f}")
    print("\nreader steps/s (median)        plain    coded   coded/plain   wait ms/step   CPU ms/step (plain/coded)")
    for kind, modes in result["reader"].items():
        for mode, pair in modes.items():
            p, c = pair["plain"], pair["coded"]
            print(f"  {kind + ' ' + mode:<28}{p['steps_per_s']['median']:8.1f} {c['steps_per_s']['median']:8.1f} "
                  f"{pair['coded_over_plain']:10.2f}     {p['wait_ms_per_step']['median']:5.1f} / "
                  f"{c['wait_ms_per_step']['median']:<6.1f} {p['cpu_ms_per_step']['median']:6.1f} / "
                  f"{c['cpu_ms_per_step']['median']:.1f}")
    print("\ntrainer step, wall / CPU ms   plain           coded         (the reader's share is the wait above)")
    for kind, modes in result["reader"].items():
        p, c = modes["trainer"]["plain"], modes["trainer"]["coded"]
        print(f"  {kind:<28}{p['train_ms_per_step']['median']:6.1f} / {p['train_cpu_ms_per_step']['median']:<6.1f}"
              f"  {c['train_ms_per_step']['median']:6.1f} / {c['train_cpu_ms_per_step']['median']:.1f}")
    print(f"\nload average before {result['load_before']}, after {result['load_after']}; goals {result['goals']}")


if __name__ == "__main__":
    main()
