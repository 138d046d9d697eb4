"""Images, videos and WebDataset shards made locally, for tests, examples and benchmarks.

Nothing is downloaded: real photographs come from ``skimage.data`` (shipped
inside scikit-image, when it is installed), the rest is drawn with Pillow
(gradients, shapes, noise) in many sizes and aspect ratios, encoded as
JPEG, PNG or WebP; clips are encoded with PyAV. Everything is a pure
function of its seed.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["IMAGE_TOKEN", "bad_images", "encode_image", "encode_video", "image_samples", "photos", "synthetic_image",
           "synthetic_images", "word_tokenizer", "write_lerobot", "write_media_tars"]

#: the id ``word_tokenizer`` gives the placeholder ``"<image>"``
IMAGE_TOKEN = 1000

#: skimage.data photographs shipped with the package (RGB, no download)
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "colorwheel")


def photos(names: Sequence[str] = PHOTOS) -> list[np.ndarray]:
    """The ``skimage.data`` photographs as uint8 ``[H, W, 3]`` (empty if scikit-image is missing)."""
    try:
        import skimage.data
    except ImportError:
        return []
    return [np.ascontiguousarray(getattr(skimage.data, n)()[..., :3]) for n in names]


def synthetic_image(height: int, width: int, seed: int) -> np.ndarray:
    """A drawn image: a gradient, a few shapes and some noise, uint8 ``[height, width, 3]``."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    base = (rng.random(3, dtype=np.float32) * 255 * (0.5 * y + 0.5 * x)).astype(np.uint8)
    image = Image.fromarray(np.broadcast_to(base, (height, width, 3)).copy())
    draw = ImageDraw.Draw(image)
    for _ in range(4):
        x0, x1 = sorted(rng.integers(0, width, 2).tolist())
        y0, y1 = sorted(rng.integers(0, height, 2).tolist())
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=fill)
    noise = rng.integers(-12, 13, (height, width, 3))
    return np.clip(np.asarray(image, dtype=np.int16) + noise, 0, 255).astype(np.uint8)


def synthetic_images(n: int, seed: int = 0, *, min_side: int = 16, max_side: int = 640) -> Iterator[np.ndarray]:
    """``n`` drawn images of random sizes and aspect ratios (1:8 to 8:1) between the given sides."""
    rng = np.random.default_rng(seed)
    for k in range(n):
        aspect = float(np.exp(rng.uniform(np.log(1 / 8), np.log(8))))
        area = float(rng.uniform(min_side, max_side)) ** 2
        h = int(np.clip(np.sqrt(area / aspect), min_side, max_side))
        w = int(np.clip(np.sqrt(area * aspect), min_side, max_side))
        yield synthetic_image(h, w, seed * 100_003 + k)


def encode_image(image: np.ndarray, fmt: str = "JPEG", **save: object) -> bytes:
    """``image`` encoded by Pillow (``fmt``: ``"JPEG"``, ``"PNG"``, ``"WEBP"``, ...)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" and not save else save))
    return buf.getvalue()


def encode_video(frames: np.ndarray, fps: int = 10, *, container: str = "mp4", codec: str = "mpeg4") -> bytes:
    """uint8 ``[T, H, W, 3]`` (even H and W) encoded with PyAV; ``codec``: ``"mpeg4"``, ``"libvpx"`` (webm)..."""
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height = int(frames.shape[2]), int(frames.shape[1])
        stream.pix_fmt = "yuv420p"
        for array in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(array), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def bad_images() -> dict[str, bytes]:
    """Hostile image members by name: truncated, corrupt, empty, a 30000×30000 bomb header, a GIF under .jpg."""
    good = encode_image(synthetic_image(64, 96, 1))
    bomb = bytearray(good)
    sof = next(i for i in range(2, len(bomb) - 9) if bomb[i] == 0xFF and bomb[i + 1] in (0xC0, 0xC1, 0xC2))
    bomb[sof + 5 : sof + 9] = (30000).to_bytes(2, "big") + (30000).to_bytes(2, "big")  # height, width
    corrupt = bytearray(good)
    corrupt[len(corrupt) // 2 : len(corrupt) // 2 + 64] = b"\x00" * 64
    return {
        "truncated": good[: len(good) // 2],
        "corrupt": bytes(corrupt[:20]) + bytes(range(256)) * 4,
        "empty": b"",
        "bomb": bytes(bomb),
        "gif": encode_image(synthetic_image(16, 16, 2), "GIF"),
        "text": b"this is not an image",
    }


def write_media_tars(root: Path, samples: Sequence[dict[str, Any]], per_tar: int, *, prefix: str = "shard") -> list[str]:
    """Write ``samples`` (``{"__key__": ..., "jpg": bytes, "txt": str, ...}``) as WebDataset tar shards."""
    import webdataset as wds

    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for start in range(0, len(samples), per_tar):
        path = root / f"{prefix}-{start // per_tar:04d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for sample in samples[start : start + per_tar]:
                sink.write(dict(sample))
        paths.append(str(path))
    return paths


def word_tokenizer(texts: list[str]) -> list[list[int]]:
    """A tiny local tokenizer: one id in 1..999 per word (a hash), ``"<image>"`` -> :data:`IMAGE_TOKEN`."""
    import zlib

    return [[IMAGE_TOKEN if w == "<image>" else 1 + zlib.crc32(w.encode()) % 999 for w in t.split()] for t in texts]


def image_samples(n: int, seed: int = 0, *, max_side: int = 320, formats: Sequence[str] = ("JPEG", "PNG", "WEBP"),
                  max_images: int = 2) -> list[dict[str, Any]]:
    """``n`` WebDataset samples of 0..``max_images`` images (``0.jpg``, ``1.png``...; one image as ``jpg``)
    with a caption (``txt``); every other caption places its images with ``<image>`` placeholders.
    The first samples are the ``skimage.data`` photographs where available."""
    rng = np.random.default_rng(seed)
    pool = photos() + list(synthetic_images(n * max_images, seed, max_side=max_side))
    ext = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}
    out: list[dict[str, Any]] = []
    for k in range(n):
        count = int(rng.integers(1, max_images + 1))
        words = [f"w{int(w)}" for w in rng.integers(0, 50, int(rng.integers(1, 12)))]
        if k % 2:
            words = ["<image>"] * count + words if count > 1 else words[:2] + ["<image>"] + words[2:]
        sample: dict[str, Any] = {"__key__": f"img{seed}-{k:05d}", "txt": " ".join(words)}
        for i in range(count):
            fmt = formats[int(rng.integers(0, len(formats)))]
            name = ext[fmt] if count == 1 else f"{i}.{ext[fmt]}"
            sample[name] = encode_image(pool[(k * max_images + i) % len(pool)], fmt)
        out.append(sample)
    return out


def write_lerobot(root: Path, lengths: Sequence[int], *, cameras: Sequence[str] = ("observation.images.top",),
                  fps: int = 10, size: tuple[int, int] = (32, 48), state_dim: int = 3, action_dim: int = 2) -> Path:
    """A tiny LeRobot (v2 layout) dataset: episode ``e`` has ``lengths[e]`` steps; frame ``i`` of camera ``c``
    is flat gray ``(37·e + 11·i + 60·c) % 200``, ``state[i] = [e, i, 0...]`` and ``action[i] = [e, i, ...]``."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    features: dict[str, Any] = {"observation.state": {"dtype": "float32", "shape": [state_dim]},
                                "action": {"dtype": "float32", "shape": [action_dim]},
                                "timestamp": {"dtype": "float32", "shape": [1]}}
    features.update({c: {"dtype": "video", "shape": [size[0], size[1], 3]} for c in cameras})
    info = {"fps": fps, "chunks_size": 1000, "total_episodes": len(lengths), "features": features,
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"}
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    with open(root / "meta" / "episodes.jsonl", "w") as f:
        for e, n in enumerate(lengths):
            f.write(json.dumps({"episode_index": e, "length": n, "tasks": [f"pick the cube number {e}"]}) + "\n")
    for e, n in enumerate(lengths):
        data = root / "data" / "chunk-000" / f"episode_{e:06d}.parquet"
        data.parent.mkdir(parents=True, exist_ok=True)
        state = [[float(e), float(i)] + [0.0] * (state_dim - 2) for i in range(n)]
        action = [[float(e), float(i)] + [1.0] * (action_dim - 2) for i in range(n)]
        pq.write_table(pa.table({"observation.state": state, "action": action,
                                 "timestamp": [i / fps for i in range(n)], "frame_index": list(range(n)),
                                 "episode_index": [e] * n}), str(data))
        for c, camera in enumerate(cameras):
            frames = np.stack([np.full((*size, 3), (37 * e + 11 * i + 60 * c) % 200, np.uint8) for i in range(n)])
            video = root / "videos" / "chunk-000" / camera / f"episode_{e:06d}.mp4"
            video.parent.mkdir(parents=True, exist_ok=True)
            video.write_bytes(encode_video(frames, fps=fps))
    return root
