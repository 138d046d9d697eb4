"""Shape bucketing: which bucket a sample falls in, edges learned from data, and which bucket's batch is next.

Diffusion and video-generation models train on same-shape batches (seed 001
§6: ~8 aspect-ratio buckets, one bucket per batch; mixing shapes forces
letterboxing or padding); speech recipes bucket by duration. Pure functions
(numbers and tensors in, numbers out), run by ``datapipes.BucketBatches``:

- **Keys** (:data:`BUCKET_KEYS`): a sample's :func:`aspect_ratio` (width /
  height of its first image, clip or patch grid), :func:`resolution` (its
  pixels), :func:`duration` (seconds of audio) or :func:`frames` (of its
  first clip, or audio feature frames). Any callable ``sample -> float`` too.
- **Edges**: ``n - 1`` strictly increasing inner edges make ``n`` buckets;
  bucket ``i`` holds ``edges[i-1] <= value < edges[i]`` (:func:`bucket_of`).
  :func:`learn_edges` puts them at the quantiles of a sample of values (so
  each bucket gets about ``1/n`` of it); :func:`edges_between` puts them
  half-way (geometrically) between given bucket centres, e.g. aspect ratios.
- **Order**: :func:`next_bucket` picks the bucket whose batch comes next:
  the one that filled first (its ``batch_size``-th buffered sample arrived
  earliest), so each bucket's share of the steps follows its share of the
  data, and no bucket waits for the end of the stream; once the stream has
  ended, the partial buckets in bucket order. :func:`plan_bucket_batches` is
  that rule over a whole sequence, the specification the stage follows.
- **Shapes** (:class:`BucketResize`): a row's image resized (cover, centre
  crop) to its bucket's shape under the resolution of the batch's step, so a
  resolution schedule changes every bucket's shape at exactly that step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from torch_tgb.errors import MediaError
from torch_tgb.transforms.vision import (
    ResolutionLike,
    ResolutionSchedule,
    as_resolution,
    as_resolution_schedule,
    resize_frames,
    target_size,
)

__all__ = [
    "BUCKET_KEYS",
    "BucketKey",
    "BucketResize",
    "aspect_ratio",
    "bucket_of",
    "check_edges",
    "duration",
    "edges_between",
    "frames",
    "learn_edges",
    "next_bucket",
    "plan_bucket_batches",
    "resolution",
]

BucketKey = Callable[[Mapping[str, Any]], float]


def _height_width(sample: Mapping[str, Any]) -> tuple[int, int]:
    """(height, width) of a sample's first image, clip or patch grid."""
    for key in ("images", "videos"):
        items = sample.get(key)
        if items is not None and len(items):
            shape = items[0].shape
            return int(shape[-3]), int(shape[-2])
    for key in ("image_grid_thw", "video_grid_thw"):
        grid = sample.get(key)
        if grid is not None and grid.numel():
            _, h, w = (int(g) for g in grid.reshape(-1, 3)[0])
            return h, w
    if "image_size" in sample:
        h, w = (int(v) for v in sample["image_size"].reshape(-1)[:2])
        return h, w
    raise MediaError(f"sample {sample.get('__key__')!r} has no image, clip or grid to take a shape from "
                     f"(fields {sorted(sample)})", "bucket_key")


def aspect_ratio(sample: Mapping[str, Any]) -> float:
    """Width / height of the sample's first image, clip or patch grid (16:9 is 1.78)."""
    h, w = _height_width(sample)
    if h < 1 or w < 1:
        raise MediaError(f"sample {sample.get('__key__')!r}: zero-size image ({w}x{h})", "zero_size")
    return w / h


def resolution(sample: Mapping[str, Any]) -> float:
    """Pixels (or patches, from a grid) of the sample's first image or clip frame."""
    h, w = _height_width(sample)
    return float(h * w)


def duration(sample: Mapping[str, Any]) -> float:
    """Seconds of audio in the sample: its ``audio_lengths`` over the ``__sample_rate__`` ``DecodeAudio`` set."""
    lengths, rate = sample.get("audio_lengths"), sample.get("__sample_rate__")
    if lengths is None or not rate:
        raise MediaError(f"sample {sample.get('__key__')!r} has no decoded audio (audio_lengths, __sample_rate__) "
                         f"to take a duration from", "bucket_key")
    return float(lengths.sum()) / float(rate)


def frames(sample: Mapping[str, Any]) -> float:
    """Frames of the sample's first clip (``videos``, else the grid's ``t``), else its audio feature frames."""
    clips = sample.get("videos")
    if clips is not None and len(clips):
        return float(clips[0].shape[0])
    grid = sample.get("video_grid_thw")
    if grid is not None and grid.numel():
        return float(grid.reshape(-1, 3)[0, 0])
    feats = sample.get("audio_feature_lengths")
    if feats is not None:
        return float(feats.sum())
    raise MediaError(f"sample {sample.get('__key__')!r} has no clip or audio features to count frames of",
                     "bucket_key")


#: the named keys ``BucketBatches(key=...)`` takes
BUCKET_KEYS: dict[str, BucketKey] = {
    "aspect_ratio": aspect_ratio,
    "resolution": resolution,
    "duration": duration,
    "frames": frames,
}


def check_edges(edges: Sequence[float]) -> tuple[float, ...]:
    """``edges`` as floats, refused unless finite and strictly increasing."""
    out = tuple(float(e) for e in edges)
    if any(not math.isfinite(e) for e in out) or any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"bucket edges must be finite and strictly increasing, got {list(edges)}")
    return out


def bucket_of(values: float | Sequence[float] | np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Bucket of each value: the number of edges ``<= value`` (``len(edges) + 1`` buckets)."""
    arr = np.asarray(values, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"bucket key values must be finite, got {arr[~np.isfinite(arr)][:3].tolist()}")
    return np.searchsorted(np.asarray(edges, dtype=np.float64), arr, side="right").astype(np.int64)


def learn_edges(values: Sequence[float] | np.ndarray, buckets: int) -> tuple[float, ...]:
    """Inner edges that cut ``values`` into ``buckets`` parts of about equal counts (quantiles).

    Edge ``k`` is the value at rank ``round(k·m / buckets)`` of the ``m``
    sorted values, moved up to the next distinct value where it ties with the
    one below (a value never straddles an edge); edges that coincide are
    merged, so many equal values give fewer buckets. Deterministic.
    """
    if not isinstance(buckets, int) or buckets < 1:
        raise ValueError(f"buckets must be an int >= 1, got {buckets!r}")
    s = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    if not np.isfinite(s).all():
        raise ValueError("bucket key values must be finite to learn edges from")
    m = len(s)
    out: list[float] = []
    for k in range(1, buckets):
        c = round(k * m / buckets)
        if c <= 0 or c >= m:
            continue
        j = int(np.searchsorted(s, s[c - 1], side="right"))  # the first value above the one below the cut
        if j < m and (not out or s[j] > out[-1]):
            out.append(float(s[j]))
    return tuple(out)


def edges_between(centers: Sequence[float], *, log: bool = True) -> tuple[float, ...]:
    """Inner edges half-way between sorted bucket ``centers`` (geometric mean with ``log``: aspect ratios)."""
    c = [float(x) for x in centers]
    if any(b <= a for a, b in zip(c, c[1:])) or (log and any(x <= 0 for x in c)):
        raise ValueError(f"bucket centres must be strictly increasing (and > 0 with log=True), got {list(centers)}")
    return check_edges([math.sqrt(a * b) if log else (a + b) / 2 for a, b in zip(c, c[1:])])


def next_bucket(buffered: Mapping[int, Sequence[int]], batch_size: int, *, ended: bool) -> int | None:
    """The bucket whose batch is made next, or None to read on.

    ``buffered[b]``: the arrival numbers (ascending) of bucket ``b``'s
    samples not batched yet. A bucket with ``batch_size`` of them is ready;
    of the ready ones, the one whose ``batch_size``-th sample arrived first.
    None while none is ready and the source has not ended; once it has, the
    smallest bucket that holds any sample (its batch is padded), and None
    when all are empty.
    """
    ready = [(arrivals[batch_size - 1], b) for b, arrivals in buffered.items() if len(arrivals) >= batch_size]
    if ready:
        return min(ready)[1]
    if not ended:
        return None
    left = [b for b, arrivals in buffered.items() if arrivals]
    return min(left) if left else None


def plan_bucket_batches(buckets: Sequence[int], batch_size: int) -> list[tuple[int, list[int]]]:
    """The batches :func:`next_bucket` makes of a stream whose sample ``i`` is in bucket ``buckets[i]``.

    Each batch is ``(bucket, sample indices)``: ``batch_size`` of them, fewer
    only in a bucket's last batch. What ``BucketBatches`` yields, as indices.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    buffered: dict[int, list[int]] = {}
    out: list[tuple[int, list[int]]] = []
    for i, b in enumerate(buckets):
        buffered.setdefault(int(b), []).append(i)
        while (ready := next_bucket(buffered, batch_size, ended=False)) is not None:
            out.append((ready, buffered[ready][:batch_size]))
            del buffered[ready][:batch_size]
    while (left := next_bucket(buffered, batch_size, ended=True)) is not None:
        out.append((left, buffered[left][:batch_size]))
        del buffered[left][:batch_size]
    return out


@dataclass(frozen=True)
class BucketResize:
    """``(row, bucket, step) -> row``: the row's image resized to its bucket's shape at ``step``.

    Bucket ``b``'s shape is ``transforms.vision.target_size`` of an image of
    aspect ``aspects[b]`` (width / height) under ``resolution`` (an int, a
    ``Resolution`` or a schedule over steps) with sides multiples of
    ``factor``. The image (the first of ``row[key]``, uint8 ``[H, W, 3]``) is
    scaled to cover that shape and cropped at its centre. The row gets
    ``"pixels"`` uint8 ``[h·w, 3]`` (a ragged field: its trailing shape is the
    same in every bucket) and ``"image_size"`` int64 ``[2]`` = ``(h, w)``;
    ``row[key]`` is dropped. A trainer views a rank's rows of one batch as
    ``pixels.view(R, h, w, 3)``.
    """

    aspects: tuple[float, ...]
    resolution: ResolutionLike | ResolutionSchedule
    factor: int = 16
    key: str = "images"
    mode: str = "bicubic"

    def __post_init__(self) -> None:
        if not self.aspects or any(not (math.isfinite(a) and a > 0) for a in self.aspects):
            raise ValueError(f"BucketResize aspects must be finite and > 0, got {self.aspects}")
        if self.factor < 1 or self.mode not in ("bicubic", "bilinear"):
            raise ValueError(f"need factor >= 1 and mode bicubic|bilinear, got {self.factor=} {self.mode=}")
        self.size(0, 0)  # the resolution's checks, now

    def size(self, bucket: int, step: int) -> tuple[int, int]:
        """``(h, w)`` of bucket ``bucket``'s images at ``step``."""
        if not 0 <= bucket < len(self.aspects):
            raise ValueError(f"bucket {bucket} has no aspect ratio (BucketResize has {len(self.aspects)})")
        res = as_resolution(as_resolution_schedule(self.resolution)(step))
        aspect = self.aspects[bucket]
        base = 4096  # a virtual image of that aspect, large enough that rounding to factor keeps it
        return target_size(max(1, round(base / math.sqrt(aspect))), max(1, round(base * math.sqrt(aspect))), res,
                           factor=self.factor)

    def __call__(self, row: Mapping[str, Any], bucket: int, step: int) -> dict[str, Any]:
        images = row.get(self.key)
        if not images:
            raise MediaError(f"sample {row.get('__key__')!r} has no {self.key!r} to resize", "bucket_key")
        image = images[0]
        h, w = self.size(bucket, step)
        H, W = int(image.shape[-3]), int(image.shape[-2])
        scale = max(h / H, w / W)
        cover = (max(h, math.ceil(H * scale - 1e-9)), max(w, math.ceil(W * scale - 1e-9)))
        resized = resize_frames(image, cover, mode=self.mode)
        top, left = (cover[0] - h) // 2, (cover[1] - w) // 2
        crop = resized[top : top + h, left : left + w]
        out = {k: v for k, v in row.items() if k != self.key}
        out["pixels"] = crop.reshape(h * w, int(image.shape[-1])).contiguous()
        out["image_size"] = torch.tensor([h, w], dtype=torch.int64)
        return out
