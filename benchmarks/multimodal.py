"""Multimodal producers: decode + resize + patchify throughput, and VLM balance over dp x micro-batches.

**Throughput** (one producer process, one thread: ``torch.set_num_threads(1)``).
The same encoded files (the ``skimage.data`` photographs plus drawn images of
random sizes 64-1536 px and aspect ratios 1:4-4:1; JPEG q90 mostly, some PNG
and WebP) go through

- ``pillow``: Pillow's own ``Image.open(...).convert("RGB").resize(size, BICUBIC)``
  to the same target size, as a numpy array (the baseline);
- ``stages``: ``DecodeImages -> ResizeImages -> Patchify`` nodes (simplejpeg for
  JPEG where installed, torch's antialiased bicubic, uint8 patches
  ``[n, 3·14·14]``), fed by an in-memory source;
- ``stages_pillow``: the same with ``DecodeImages(decoder="pillow")``.

Rounds alternate the three; the figure is the median of ``--rounds`` rounds,
with images/s, MB/s of encoded input and MB/s of uint8 pixels out, and each
as a ratio to ``pillow`` in the same round (goal: ``stages`` >= 0.8x).
Resolution: ``Resolution(max_pixels=448*448)`` with patch 14, merge 2 (aspect
kept, sides multiples of 28), and the fixed square 224.

**Balance** (pure, no I/O). Samples with log-normal caption lengths (median
``--caption-median`` tokens) and 0-4 images (P = 0.15, 0.45, 0.2, 0.12,
0.08) of random sizes (sides log-uniform 64-2048 px) resized under
``max_pixels = 1024²`` (patch 14, merge 2: ``n/4`` tokens for ``n`` patches)
are packed into rows of ``--seq-len`` backbone tokens with BFD (windows of
512 samples; samples are never split). Global batches of ``dp·m·2`` rows,
dp = 8, m = 4. Costs in FLOPs: backbone ``6·L·d·(Σ len² + α·Σ len)`` (a 7B
decoder, causal attention inside each packed sample), encoder
``12·Le·de·(Σ n² + β·Σ n)`` (a 600M ViT: bidirectional attention inside each
image), i.e. ``VLMCost`` with ``encoder_weight = 2·Le·de / (L·d)``. Methods:
``none`` (arrival order), ``kk_backbone`` (kk on the backbone cost alone,
OVERLORD's "backbone balance"), ``greedy`` and ``kk`` on encoder + backbone
(``transforms.vlm_balance.micro_batch_plan``), and ``vector``
(``balance_vector``: both costs even in every micro-batch). Reported: max/mean over the dp
ranks of encoder, backbone and total cost, max/mean over the 32
micro-batches, and the simulated step time ``Σ_k (max_r enc(r,k) + max_r
bb(r,k))`` at 400 TFLOP/s per replica (each module's phase of each
micro-batch waits for its slowest rank), against perfect balance.

Run:  python benchmarks/multimodal.py            (5 rounds x 120 images, 50 global batches)
      python benchmarks/multimodal.py --quick    (2 rounds x 40 images, 10 global batches)
Writes multimodal.json into --results-dir (default ./tgb-bench-results).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb import datapipes
from torch_tgb.testing.media import encode_image, photos, synthetic_image
from torch_tgb.transforms import Resolution, micro_batch_plan, pack_bfd, simulated_step_time, target_size
from torch_tgb.transforms.balance import part_costs, row_costs
from torch_tgb.transforms.balancer import imbalance
from torch_tgb.transforms.vlm_balance import encoder_costs

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, machine, results_dir

PATCH, MERGE = 14, 2
BACKBONE = {"name": "7B dense decoder", "params_non_embedding": 6.5e9, "layers": 32, "d_model": 4096}
ENCODER = {"name": "600M ViT", "params": 6.0e8, "layers": 32, "d_model": 1280}
REPLICA_FLOPS = 400e12


class Files(BaseNode[dict[str, Any]]):
    """The benchmark's encoded images as WebDataset-like samples, from memory."""

    def __init__(self, files: list[tuple[str, bytes]]) -> None:
        super().__init__()
        self.files, self._i = files, 0

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._i = 0 if initial_state is None else int(initial_state["i"])

    def next(self) -> dict[str, Any]:
        if self._i >= len(self.files):
            raise StopIteration
        ext, data = self.files[self._i]
        self._i += 1
        return {"__key__": str(self._i), ext: data, "tokens": torch.zeros(0, dtype=torch.int64)}

    def get_state(self) -> dict[str, Any]:
        return {"i": self._i}


def make_files(n: int, seed: int) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    images = photos()
    while len(images) < n:
        side = float(np.exp(rng.uniform(np.log(64), np.log(1536))))
        aspect = float(np.exp(rng.uniform(np.log(1 / 4), np.log(4))))
        h, w = max(16, int(side / np.sqrt(aspect))), max(16, int(side * np.sqrt(aspect)))
        images.append(synthetic_image(min(h, 1536), min(w, 1536), seed * 7919 + len(images)))
    out = []
    for k, image in enumerate(images[:n]):
        fmt, ext = ("PNG", "png") if k % 10 == 7 else ("WEBP", "webp") if k % 10 == 9 else ("JPEG", "jpg")
        out.append((ext, encode_image(image, fmt)))
    return out


def pillow_pass(files: list[tuple[str, bytes]], resolution: Resolution) -> int:
    from PIL import Image

    out = 0
    for _, data in files:
        with Image.open(io.BytesIO(data)) as im:
            rgb = im.convert("RGB")
            h, w = target_size(rgb.height, rgb.width, resolution, factor=PATCH * MERGE)
            out += np.asarray(rgb.resize((w, h), Image.Resampling.BICUBIC)).nbytes
    return out


def stages_pass(files: list[tuple[str, bytes]], resolution: Resolution, decoder: str) -> int:
    images = datapipes.DecodeImages(Files(files), decoder=decoder, on_error="raise")
    resized = datapipes.ResizeImages(images, resolution, patch=PATCH, merge=MERGE, on_error="raise")
    patches = datapipes.Patchify(resized, patch=PATCH, merge=MERGE, on_error="raise")
    return sum(int(d["pixel_values"].numel()) for d in patches)


def throughput(files: list[tuple[str, bytes]], rounds: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    bytes_in = sum(len(d) for _, d in files)
    out: dict[str, Any] = {}
    for label, resolution in (("dynamic_448x448", Resolution(max_pixels=448 * 448)), ("square_224", Resolution(side=224))):
        runs: dict[str, list[tuple[float, int]]] = {"pillow": [], "stages": [], "stages_pillow": []}
        for _ in range(rounds):
            for name in runs:
                t = time.perf_counter()
                if name == "pillow":
                    nbytes = pillow_pass(files, resolution)
                else:
                    nbytes = stages_pass(files, resolution, "auto" if name == "stages" else "pillow")
                runs[name].append((time.perf_counter() - t, nbytes))
        rows = {}
        for name, values in runs.items():
            seconds = statistics.median(s for s, _ in values)
            rows[name] = {
                "images_per_s": len(files) / seconds,
                "mb_in_per_s": bytes_in / seconds / 1e6,
                "mb_out_per_s": values[0][1] / seconds / 1e6,
                "seconds_median": seconds,
                "ratio_to_pillow": statistics.median(
                    p[0] / s[0] for p, s in zip(runs["pillow"], values)),
            }
        out[label] = rows
    return {"images": len(files), "bytes_in": bytes_in, "rounds": rounds, "threads": 1, "results": out}


# --- balance ------------------------------------------------------------------------------------------------


def vlm_samples(rng: np.random.Generator, n: int, median: float, seq_len: int) -> list[tuple[int, list[int]]]:
    """(text tokens, [patches per image]) per sample; text + image tokens <= seq_len."""
    res = Resolution(max_pixels=1024 * 1024)
    out = []
    while len(out) < n:
        text = int(np.clip(rng.lognormal(np.log(median), 1.2), 8, seq_len))
        count = int(rng.choice(5, p=[0.15, 0.45, 0.2, 0.12, 0.08]))
        patches = []
        for _ in range(count):
            h, w = (int(np.exp(rng.uniform(np.log(64), np.log(2048)))) for _ in range(2))
            th, tw = target_size(h, w, res, factor=PATCH * MERGE)
            patches.append((th // PATCH) * (tw // PATCH))
        if text + sum(p // MERGE**2 for p in patches) <= seq_len:
            out.append((text, patches))
    return out


def balance_sim(args: argparse.Namespace, batches: int) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    dp, m, per = 8, 4, 2
    gbs = dp * m * per
    alpha = BACKBONE["params_non_embedding"] / (BACKBONE["layers"] * BACKBONE["d_model"])
    beta = ENCODER["params"] / (2 * ENCODER["layers"] * ENCODER["d_model"])
    bb_flops = 6 * BACKBONE["layers"] * BACKBONE["d_model"]
    enc_flops = 12 * ENCODER["layers"] * ENCODER["d_model"]
    rows_enc: list[float] = []
    rows_bb: list[float] = []
    while len(rows_bb) < batches * gbs:
        samples = vlm_samples(rng, 512, args.caption_median, args.seq_len)
        lengths = [t + sum(p // MERGE**2 for p in ps) for t, ps in samples]
        for row in pack_bfd(lengths, args.seq_len):
            rows_bb.append(bb_flops * float(row_costs([[e - s for _, s, e in row]], alpha=alpha)[0]))
            patches = [p for doc, _, _ in row for p in samples[doc][1]]
            rows_enc.append(enc_flops * float(encoder_costs([patches], beta=beta)[0]))
    enc_all, bb_all = np.array(rows_enc), np.array(rows_bb)
    methods = {"none": (None, "total"), "kk_backbone": ("kk", "backbone"), "greedy": ("greedy", "total"),
               "kk": ("kk", "total"), "vector": ("vector", "both")}
    stats: dict[str, dict[str, list[float]]] = {k: {} for k in methods}
    for b in range(batches):
        enc, bb = enc_all[b * gbs : (b + 1) * gbs], bb_all[b * gbs : (b + 1) * gbs]
        perfect = m * (enc.sum() + bb.sum()) / (dp * m) / REPLICA_FLOPS
        for name, (method, by) in methods.items():
            plan = micro_batch_plan(bb if by == "backbone" else enc + bb, dp, m, method, encoder=enc, backbone=bb)
            ranks = [[i for mb in rank for i in mb] for rank in plan]
            micro = [mb for rank in plan for mb in rank]
            step = simulated_step_time(enc, bb, plan) / REPLICA_FLOPS
            for key, value in (
                ("encoder_max_over_mean", imbalance(part_costs(enc, ranks))),
                ("backbone_max_over_mean", imbalance(part_costs(bb, ranks))),
                ("total_max_over_mean", imbalance(part_costs(enc + bb, ranks))),
                ("micro_total_max_over_mean", imbalance(part_costs(enc + bb, micro))),
                ("step_s", step),
                ("step_over_perfect", step / perfect),
            ):
                stats[name].setdefault(key, []).append(value)
    summary = {name: {k: float(np.mean(v)) for k, v in s.items()} for name, s in stats.items()}
    for name in summary:
        summary[name]["speedup_vs_none"] = summary["none"]["step_s"] / summary[name]["step_s"]
    return {
        "config": {"dp": dp, "micro_batches": m, "rows_per_micro_batch": per, "global_batch_rows": gbs,
                   "batches": batches, "seq_len": args.seq_len, "caption_median": args.caption_median,
                   "images_per_sample_p": [0.15, 0.45, 0.2, 0.12, 0.08], "image_sides": [64, 2048],
                   "max_pixels": 1024 * 1024, "patch": PATCH, "merge": MERGE},
        "cost_model": {"backbone": BACKBONE, "encoder": ENCODER, "alpha": alpha, "beta": beta,
                       "encoder_weight": enc_flops / bb_flops, "replica_flops_per_s": REPLICA_FLOPS},
        "encoder_share_of_flops": float(enc_all.sum() / (enc_all.sum() + bb_all.sum())),
        "methods": summary,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds x 40 images, 10 global batches")
    ap.add_argument("--images", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--seq-len", type=int, default=16_384)
    ap.add_argument("--caption-median", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("throughput", "balance"), default=None)
    add_results_arg(ap)
    args = ap.parse_args()
    images, rounds, batches = (40, 2, 10) if args.quick else (args.images, args.rounds, args.batches)
    report: dict[str, Any] = {"quick": args.quick, "machine": machine()}
    if args.only != "balance":
        report["throughput"] = tp = throughput(make_files(images, args.seed), rounds)
        print(f"decode+resize+patchify, {tp['images']} images ({tp['bytes_in'] / 1e6:.1f} MB encoded), 1 thread, "
              f"median of {rounds} rounds")
        for label, rows in tp["results"].items():
            for name, r in rows.items():
                print(f"  {label:<16} {name:<14} {r['images_per_s']:7.1f} img/s  in {r['mb_in_per_s']:6.2f} MB/s  "
                      f"out {r['mb_out_per_s']:7.2f} MB/s  x{r['ratio_to_pillow']:.2f} of pillow")
    if args.only != "throughput":
        report["balance"] = bal = balance_sim(args, batches)
        print(f"VLM balance: dp 8 x m 4, {batches} global batches of {bal['config']['global_batch_rows']} rows, "
              f"encoder {bal['encoder_share_of_flops']:.0%} of FLOPs")
        print(f"  {'method':<12} {'enc max/mean':>12} {'bb max/mean':>12} {'total':>8} {'micro':>8} {'step s':>8} "
              f"{'x perfect':>9} {'speed-up':>9}")
        for name, s in bal["methods"].items():
            print(f"  {name:<12} {s['encoder_max_over_mean']:>12.3f} {s['backbone_max_over_mean']:>12.3f} "
                  f"{s['total_max_over_mean']:>8.3f} {s['micro_total_max_over_mean']:>8.3f} {s['step_s']:>8.3f} "
                  f"{s['step_over_perfect']:>9.3f} {s['speedup_vs_none']:>9.3f}")
    out = results_dir(args) / "multimodal.json"
    if args.only and out.exists():  # refresh one section, keep the other's figures (and its machine block)
        kept = json.loads(out.read_text())
        kept.update({k: v for k, v in report.items() if k != "machine"}, **{f"machine_{args.only}": report["machine"]})
        report = kept
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
