"""The data of ``compression.py``: photographs, video clips panning across them, token rows of real text.

Each generator yields global batches as the producer takes them (ragged
``pixel_values`` lists and their grids); see ``compression.py`` for what each
namespace holds and why.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from torch_tgb.testing.media import photos
from torch_tgb.transforms.vision import patchify, resize_frames

__all__ = ["image_batches", "text_tokens", "token_batches", "video_batches"]


def image_batches(steps: int, per_step: int, res: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Global batches of ``per_step`` photographs (a random crop each, resized to ``res``), patchified."""
    rng = np.random.default_rng(seed)
    pics = photos()
    if not pics:
        raise SystemExit("scikit-image is needed for the photographs: pip install 'torch-tgb[bench]'")
    for _ in range(steps):
        pixels, grids = [], []
        for _ in range(per_step):
            p = pics[int(rng.integers(len(pics)))]
            h, w = p.shape[:2]
            side = int(min(h, w) * rng.uniform(0.6, 1.0))
            y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
            crop = torch.from_numpy(np.ascontiguousarray(p[y : y + side, x : x + side]))
            patches, grid = patchify(resize_frames(crop, (res, res)), 14, merge=2)
            pixels.append(patches)
            grids.append(torch.tensor([grid]))
        ids = torch.from_numpy(rng.integers(0, 32000, (per_step, 256)).astype(np.int32))
        yield {"input_ids": ids, "pixel_values": pixels, "image_grid_thw": grids}


def _clip(photo: np.ndarray, frames: int, side: int, rng: np.random.Generator) -> np.ndarray:
    """``frames`` frames of a camera panning across ``photo``, encoded with PyAV and decoded back."""
    import av

    h, w = photo.shape[:2]
    window = int(min(h, w) * 0.7)
    dy, dx = (int(v) for v in rng.integers(-3, 4, 2))
    y0, x0 = int(rng.integers(0, h - window + 1)), int(rng.integers(0, w - window + 1))
    shots = []
    for t in range(frames):
        y = min(max(0, y0 + dy * t), h - window)
        x = min(max(0, x0 + dx * t), w - window)
        crop = torch.from_numpy(np.ascontiguousarray(photo[y : y + window, x : x + window]))
        shots.append(resize_frames(crop, (side, side)).numpy())
    buf = io.BytesIO()
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream(codec, rate=10)
        stream.width = stream.height = side
        stream.pix_fmt = "yuv420p"
        for array in shots:
            for packet in stream.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    buf.seek(0)
    with av.open(buf) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def video_batches(steps: int, per_step: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    pics = photos()
    for _ in range(steps):
        clips, grids = [], []
        for _ in range(per_step):
            frames = _clip(pics[int(rng.integers(len(pics)))], 16, 224, rng)
            patches, grid = patchify(torch.from_numpy(frames), 14, temporal_patch=2, merge=2)
            clips.append(patches)
            grids.append(torch.tensor([grid]))
        ids = torch.from_numpy(rng.integers(0, 32000, (per_step, 256)).astype(np.int32))
        yield {"input_ids": ids, "pixel_values_videos": clips, "video_grid_thw": grids}


def text_tokens(count: int) -> tuple[np.ndarray, str]:
    """``count`` uint16 token ids of real text (and what they are), cycled if the text is shorter."""
    import importlib.metadata as md

    texts = [d.read_text("METADATA") or "" for d in md.distributions()]
    texts += [p.read_text(encoding="utf-8") for p in sorted((Path(__file__).parents[1] / "docs").glob("*.md"))]
    # each paragraph once: package descriptions repeat licence texts, which would flatter any compressor
    paragraphs = list(dict.fromkeys(q for t in texts for q in t.split("\n\n") if q.strip()))
    texts = ["\n\n".join(paragraphs[i : i + 200]) for i in range(0, len(paragraphs), 200)]
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        ids = np.random.default_rng(0).zipf(1.2, count).clip(0, 31999).astype(np.uint16)
        return ids, "Zipf(1.2) ids (tokenizers is not installed)"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=32000, show_progress=False))
    ids = np.concatenate([np.asarray(e.ids, dtype=np.uint16) for e in tok.encode_batch(texts)])
    chars = sum(len(t) for t in texts)
    # never repeated: a repeat within zstd's window would compress to nothing and flatter the ratio
    return ids[:count], (f"{chars / 1e6:.1f} M characters of package descriptions and docs, byte-level "
                         f"BPE of 32,000 tokens ({ids.size / 1e6:.2f} M tokens)")


def token_batches(steps: int, ids: np.ndarray, rows: int = 16, seq: int = 2048) -> Iterator[dict[str, Any]]:
    """Up to ``steps`` batches of ``rows`` rows of ``seq`` consecutive tokens (as many as ``ids`` holds)."""
    per = rows * seq
    for s in range(min(steps, ids.size // per)):
        yield {"input_ids": torch.from_numpy(ids[s * per : (s + 1) * per].reshape(rows, seq).astype(np.uint16))}
