"""Decoding one compressed step: where its CPU goes, the decode path before and after, lz4, threads (issue 48).

On one step's tensor of real data (``_compression_data``: 8 photographs at
448, ``pixel_values`` [8192, 588] uint8, 4.8 MB; 4 video clips, [8192, 1176]),
stored as the image / video namespaces of ``compression.py`` store it
(``zstd:1+delta:3x14x14``, ``zstd:1+delta:3x2x14x14``), rounds interleaved
(medians and min-max), CPU milliseconds per step of the decoding thread
(``time.thread_time``: what the work costs whatever else runs):

- ``before``: the decode path as it was: ``ZstdDecompressor().decompress``
  into fresh bytes, copied into the tensor's buffer, the delta filter undone
  by numpy adds alone;
- ``after``: ``Codec.decode_into``: zstd decodes straight into the buffer
  (``stream_reader.readinto``, a decoder per thread), the filter undone there
  (rows and columns by torch's ``cumsum_``: this process runs torch on one
  intra-op thread, as the end-to-end benchmark's trainer and torchrun's
  workers do; ``_delta.delta_decode``);
- its parts: ``zstd`` (the decode alone, into the buffer), ``delta`` (the
  filter alone, as ``after`` undoes it) and ``delta_numpy`` (by numpy adds
  alone, as ``before``), ``crc`` (CRC32C of the stored bytes, the verify policy's);
- ``lz4`` / ``lz4+delta``: lz4 block decode (into fresh bytes: the ``lz4``
  package has no decode into a buffer) with the same filter, and its ratio:
  the measurement behind "lz4 if it wins";
- ``threads``: wall ms per step of 8 steps decoded by 1 and by 2 threads (the
  reader's read-ahead pool): zstd and numpy release the GIL, so two cores
  decode two steps at once (on a loaded machine, only as far as the cores are free).

Run:  python benchmarks/decode_path.py [--rounds N]   (writes decode_path.json)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, interleave, results_dir, save, spread  # noqa: E402
from _compression_data import image_batches, video_batches  # noqa: E402

from torch_tgb.format import parse_codec  # noqa: E402
from torch_tgb.format._delta import delta_decode  # noqa: E402

SPECS = {"image": "zstd:1+delta:3x14x14", "video": "zstd:1+delta:3x2x14x14"}


def step_tensor(kind: str) -> np.ndarray:
    if kind == "image":
        batch = next(image_batches(1, 8, 448))
        return np.ascontiguousarray(np.concatenate([p.numpy() for p in batch["pixel_values"]]))
    batch = next(video_batches(1, 4))
    return np.ascontiguousarray(np.concatenate([p.numpy() for p in batch["pixel_values_videos"]]))


def before(codec: Any, stored: bytes, dst: bytearray, shape: tuple[int, ...]) -> None:
    """The decode path before: fresh bytes from zstd, copied into the buffer, the filter undone."""
    import zstandard as zstd

    out = zstd.ZstdDecompressor().decompress(stored, allow_extra_data=False)
    memoryview(dst)[:] = out
    delta_decode(np.frombuffer(dst, dtype=np.uint8).reshape(shape), codec.delta, short_runs="numpy")


def cpu_ms(fn: Callable[[], None], reps: int) -> float:
    t0 = time.thread_time()
    for _ in range(reps):
        fn()
    return (time.thread_time() - t0) / reps * 1e3


def measure_kind(kind: str, rounds: int, reps: int) -> dict[str, Any]:
    import zstandard as zstd

    array = step_tensor(kind)
    codec = parse_codec(SPECS[kind])
    stored = codec.encode(array)
    dst = bytearray(array.nbytes)
    view = np.frombuffer(dst, dtype=np.uint8).reshape(array.shape)
    src = memoryview(stored)

    def after() -> None:
        codec.decode_into(src, memoryview(dst), dtype=array.dtype, shape=array.shape, where=kind)

    def zstd_only() -> None:
        reader = zstd.ZstdDecompressor().stream_reader(src, read_size=len(src))
        reader.readinto(memoryview(dst))

    def delta_only() -> None:
        delta_decode(view, codec.delta)

    runs: dict[str, Callable[[], float]] = {
        "before": lambda: cpu_ms(lambda: before(codec, stored, dst, array.shape), reps),
        "after": lambda: cpu_ms(after, reps),
        "zstd": lambda: cpu_ms(zstd_only, reps),
        "delta": lambda: cpu_ms(delta_only, reps),
        "delta_numpy": lambda: cpu_ms(lambda: delta_decode(view, codec.delta, short_runs="numpy"), reps),
        "crc": lambda: cpu_ms(lambda: google_crc32c.value(stored), reps),
    }
    out: dict[str, Any] = {"shape": list(array.shape), "bytes": array.nbytes, "stored": len(stored),
                           "ratio": array.nbytes / len(stored), "spec": SPECS[kind]}
    lz4_note = _lz4(array, codec.delta, runs, reps)
    got = interleave(runs, rounds)
    after()
    assert bytes(dst) == array.tobytes()
    out["cpu_ms_per_step"] = {name: spread(v) for name, v in got.items()}
    out["after_over_before"] = spread([a / b for a, b in zip(got["after"], got["before"])])
    out["lz4"] = lz4_note
    out["threads"] = _threads(codec, stored, array, rounds)
    return out


def _lz4(array: np.ndarray, block: tuple[int, ...], runs: dict[str, Callable[[], float]], reps: int) -> dict[str, Any]:
    try:
        import lz4.block
    except ImportError:
        return {"note": "lz4 is not installed"}
    from torch_tgb.format._delta import delta_encode

    filtered = np.array(array, copy=True)
    delta_encode(filtered, block)
    plain, coded = lz4.block.compress(array.tobytes(), store_size=False), \
        lz4.block.compress(filtered.tobytes(), store_size=False)
    dst = bytearray(array.nbytes)
    view = np.frombuffer(dst, dtype=np.uint8).reshape(array.shape)

    def lz4_delta() -> None:
        memoryview(dst)[:] = lz4.block.decompress(coded, uncompressed_size=array.nbytes)
        delta_decode(view, block)

    runs["lz4"] = lambda: cpu_ms(lambda: lz4.block.decompress(plain, uncompressed_size=array.nbytes), reps)
    runs["lz4+delta"] = lambda: cpu_ms(lz4_delta, reps)
    return {"ratio": array.nbytes / len(plain), "ratio_delta": array.nbytes / len(coded)}


def _threads(codec: Any, stored: bytes, array: np.ndarray, rounds: int, steps: int = 8) -> dict[str, Any]:
    """Wall ms per step of ``steps`` steps decoded by 1 and 2 threads, interleaved."""
    buffers = [bytearray(array.nbytes) for _ in range(steps)]

    def one(i: int) -> None:
        codec.decode_into(memoryview(stored), memoryview(buffers[i]), dtype=array.dtype, shape=array.shape, where="t")

    def wall(threads: int) -> float:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            t0 = time.perf_counter()
            list(pool.map(one, range(steps)))
            return (time.perf_counter() - t0) / steps * 1e3

    got = interleave({"1": lambda: wall(1), "2": lambda: wall(2)}, rounds)
    return {"wall_ms_per_step": {k: spread(v) for k, v in got.items()},
            "two_over_one": spread([b / a for a, b in zip(got["1"], got["2"])])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=5, help="decodes per measurement")
    add_results_arg(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as the end-to-end trainer and torchrun's workers (OMP_NUM_THREADS=1)
    load = os.getloadavg()
    result = {"config": {"rounds": args.rounds, "reps": args.reps, "specs": SPECS}, "load_before": list(load),
              **{kind: measure_kind(kind, args.rounds, args.reps) for kind in SPECS}}
    for kind in SPECS:
        r = result[kind]
        line = ", ".join(f"{k} {v['median']:.2f}" for k, v in r["cpu_ms_per_step"].items())
        print(f"{kind} ({r['ratio']:.2f}x at rest): {line} CPU ms per step; threads 2/1 wall "
              f"{r['threads']['two_over_one']['median']:.2f}", flush=True)
    save(results_dir(args), "decode_path", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
