"""Format benchmarks: per-step slice read from a warm local TGB vs the raw mmap floor; footer parse.

Run: ``python -m pytest benchmarks/test_bench_format.py -s --benchmark-enable``
(or without ``--benchmark-enable`` for just the printed summary, which uses its
own timing loop and writes ``benchmarks/results/format.json``).

The slice is ZeroBatch's reference batch: 32 x 512 uint32 = 64 KiB. The raw
floor is what seed 002 does per batch: ``np.frombuffer(mmap)`` ->
``reshape`` -> ``torch.from_numpy``, measured in the same process.
"""

from __future__ import annotations

import json
import mmap
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from torch_tgb.format import SliceData, SliceReader, encode_tgb, parse_footer, read_footer, write_tgb
from torch_tgb.format._footer import TRAILER_SIZE
from torch_tgb.storage import open_store

RESULTS = Path(__file__).parent / "results"
BATCH, SEQ = 32, 512
ITERS = int(os.environ.get("TGB_BENCH_ITERS", "20000"))
KEY = "data/bench/obj.tgb"


@pytest.fixture(scope="module")
def local_tgb(tmp_path_factory):
    """A warm local TGB of 8 dp slices, each 32 x 512 uint32 (64 KiB)."""
    root = tmp_path_factory.mktemp("bench")
    store = open_store(str(root))
    rng = np.random.default_rng(0)
    slices = [
        SliceData(d, 0, {"input_ids": torch.from_numpy(rng.integers(0, 50_000, (BATCH, SEQ)).astype(np.uint32))})
        for d in range(8)
    ]
    obj = write_tgb(store, KEY, slices)
    footer = read_footer(store, KEY, size=obj.size, footer_offset=obj.footer_offset, footer_length=obj.footer_length)
    reader = SliceReader(store)
    info = footer.slice(3, 0)
    reader.read(KEY, footer, info)  # warm: mapping cached, pages resident
    path = store.local_path(KEY)
    f = open(path, "rb")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    yield {"store": store, "reader": reader, "footer": footer, "info": info, "mm": mm}
    mm.close()
    f.close()


def _raw(ctx) -> Callable[[], torch.Tensor]:
    mm, offset, count = ctx["mm"], ctx["info"].start, BATCH * SEQ

    def run() -> torch.Tensor:
        return torch.from_numpy(np.frombuffer(mm, dtype=np.uint32, count=count, offset=offset).reshape(BATCH, SEQ))

    return run


def _tgb(ctx, verify: bool) -> Callable[[], dict[str, torch.Tensor]]:
    reader, footer, info = ctx["reader"], ctx["footer"], ctx["info"]
    return lambda: reader.read(KEY, footer, info, verify=verify)


def _footer_blob(num_slices: int = 1024, tensors: int = 4) -> tuple[bytes, int, int]:
    slices = [
        SliceData(d, 0, {f"t{i}": torch.zeros(2, 3, dtype=torch.int32) for i in range(tensors)}) for d in range(num_slices)
    ]
    buffers, obj = encode_tgb(slices)
    blob = b"".join(buffers)
    return blob[obj.footer_offset :], obj.size, obj.footer_offset


def _footer_parse(num_slices: int = 1024) -> Callable[[], object]:
    data, size, offset = _footer_blob(num_slices)
    return lambda: parse_footer(data, key=KEY, size=size, footer_offset=offset)


def _times_us(fn: Callable[[], object], iters: int) -> np.ndarray:
    for _ in range(min(1000, iters)):
        fn()
    out = np.empty(iters)
    clock = time.perf_counter_ns
    for i in range(iters):
        t0 = clock()
        fn()
        out[i] = clock() - t0
    return out / 1000.0


def _stats(us: np.ndarray, tokens: int | None = None) -> dict[str, float]:
    d = {"p50_us": float(np.percentile(us, 50)), "p95_us": float(np.percentile(us, 95)), "mean_us": float(us.mean())}
    if tokens:
        d["tokens_per_s_p50"] = tokens / (d["p50_us"] * 1e-6)
    return d


# --- pytest-benchmark entries (with --benchmark-enable) ----------------------------


def test_bench_raw_floor(benchmark, local_tgb):
    benchmark(_raw(local_tgb))


def test_bench_slice_read_no_crc(benchmark, local_tgb):
    out = benchmark(_tgb(local_tgb, verify=False))
    assert out["input_ids"].shape == (BATCH, SEQ)


def test_bench_slice_read_crc(benchmark, local_tgb):
    benchmark(_tgb(local_tgb, verify=True))


def test_bench_footer_parse_1024x4(benchmark):
    footer = benchmark(_footer_parse())
    assert footer.num_slices == 1024


# --- printed summary + JSON -------------------------------------------------------


def test_format_summary(local_tgb):
    tokens = BATCH * SEQ
    raw = _stats(_times_us(_raw(local_tgb), ITERS), tokens)
    nocrc = _stats(_times_us(_tgb(local_tgb, False), ITERS), tokens)
    crc = _stats(_times_us(_tgb(local_tgb, True), ITERS), tokens)
    read = _tgb(local_tgb, False)
    as_int64 = _stats(_times_us(lambda: read()["input_ids"].to(torch.int64), ITERS // 4), tokens)
    parse = _stats(_times_us(_footer_parse(), max(200, ITERS // 50)))
    parse_small = _stats(_times_us(_footer_parse(16), max(200, ITERS // 10)))
    data, size, offset = _footer_blob()
    footer = parse_footer(data, key=KEY, size=size, footer_offset=offset)
    # what a compact JSON footer with per-tensor arrays would cost to parse (same content)
    rows = footer._tensors.tolist()
    as_json = json.dumps({"names": list(footer.names), "tensors": [[r[0], r[1], footer._dims[r[4] : r[4] + r[2]].tolist(), r[6], r[7], r[5]] for r in rows]})
    json_parse = _stats(_times_us(lambda: json.loads(as_json), max(200, ITERS // 50)))
    first_slice = _stats(_times_us(lambda: footer._build(517), max(200, ITERS // 20)))
    result = {
        "slice": f"{BATCH}x{SEQ} uint32 (64 KiB), warm local mmap",
        "iters": ITERS,
        "raw_floor": raw,
        "tgb_read_no_crc": nocrc,
        "tgb_read_crc": crc,
        "tgb_read_no_crc_to_int64": as_int64,
        "ratio_p50_no_crc": nocrc["p50_us"] / raw["p50_us"],
        "ratio_p50_crc": crc["p50_us"] / raw["p50_us"],
        "footer_parse_1024x4": {**parse, "footer_bytes": len(data) - TRAILER_SIZE},
        "footer_parse_16x4": parse_small,
        "footer_slice_build": first_slice,
        "json_footer_equivalent_parse": {**json_parse, "bytes": len(as_json)},
        "seed002_reference": {"p50_us": 17, "tokens_per_s": 914e6, "machine": "Apple M2 laptop, int64 conversion included"},
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()} torch {torch.__version__}",
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "format.json").write_text(json.dumps(result, indent=2))
    print("\n== TGB format benchmark ==")
    for name in ("raw_floor", "tgb_read_no_crc", "tgb_read_crc", "tgb_read_no_crc_to_int64"):
        r = result[name]
        print(f"{name:25s} p50 {r['p50_us']:7.2f} us  p95 {r['p95_us']:7.2f} us  {r['tokens_per_s_p50'] / 1e6:9.0f} M tok/s")
    print(f"ratio p50 (no CRC) {result['ratio_p50_no_crc']:.2f}x   (CRC) {result['ratio_p50_crc']:.2f}x   target <= 1.5x (no CRC)")
    print(f"footer parse 1024 slices x 4 tensors ({len(data)} B): p50 {parse['p50_us']:.1f} us  p95 {parse['p95_us']:.1f} us")
    print(f"  (a compact-JSON footer with the same content, {len(as_json)} B: json.loads alone p50 {json_parse['p50_us']:.1f} us)")
    print(f"footer parse 16 slices x 4 tensors (a dp=8 x cp=2 TGB): p50 {parse_small['p50_us']:.1f} us")
    print(f"first use of one slice (build + shape checks): p50 {first_slice['p50_us']:.1f} us")
    print("seed 002 (M2 laptop, incl. uint32->int64 copy): ~17-18 us / batch, 914 M tok/s")
