"""Images and video as a VLM consumes them: sizes by schedule, resize, patches, image tokens.

Pure functions over uint8 tensors ``[H, W, C]`` (an image) or ``[T, H, W, C]``
(video frames); ``datapipes.produce.images`` runs them as stages.

**Resolution.** :class:`Resolution` says how big an image is made:
``Resolution(side=448)`` (or just ``448``) resizes to 448×448, the aspect not
kept (fixed-resolution ViTs: CLIP, SigLIP); ``Resolution(max_pixels=...,
min_pixels=...)`` keeps the aspect ratio (NaViT, Qwen2-VL's dynamic
resolution): both sides become multiples of ``factor`` (patch × merge), as
close to the original as possible, scaled down so that ``h·w <= max_pixels``
(a hard bound, even for extreme aspect ratios) and up towards
``min_pixels`` (best effort). A *schedule* is any ``step -> Resolution | int``;
:func:`resolution_schedule` gives the piecewise one (224 → 448 at step N,
seed 000 Fig. 1b). :func:`target_size` is the plan for one image.

**Patches.** :func:`patchify` cuts ``[T, H, W, C]`` into ``[n, C·t·p·p]``
(``t = temporal_patch``; an image is repeated to ``t`` frames, a clip padded
with its last frame to a multiple of ``t``) with grid ``(T/t, H/p, W/p)``, in
Qwen2-VL's order: with ``merge = m`` the ``m × m`` patches that the model
merges into one token are consecutive. :func:`unpatchify` inverts it.

**Tokens.** An image of grid ``(t, h, w)`` stands for ``t·h·w / m²`` tokens
in the backbone sequence; :func:`splice_image_tokens` puts that many
``image_token_id`` at each image's place in a caption's tokens.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from torch_tgb.errors import MediaError

__all__ = [
    "Resolution",
    "ResolutionLike",
    "ResolutionSchedule",
    "StepResolution",
    "as_resolution",
    "as_resolution_schedule",
    "image_token_count",
    "patchify",
    "resize_frames",
    "resolution_schedule",
    "splice_image_tokens",
    "target_size",
    "unpatchify",
]


@dataclass(frozen=True)
class Resolution:
    """A fixed square ``side``, or a pixel budget ``[min_pixels, max_pixels]`` with the aspect kept."""

    side: int | None = None
    min_pixels: int = 0
    max_pixels: int | None = None

    def __post_init__(self) -> None:
        if (self.side is None) == (self.max_pixels is None):
            raise ValueError(f"Resolution needs exactly one of side= and max_pixels=, got {self}")
        if self.side is not None and self.side < 1:
            raise ValueError(f"Resolution side must be >= 1, got {self.side}")
        if self.max_pixels is not None and not 0 <= self.min_pixels <= self.max_pixels:
            raise ValueError(f"Resolution needs 0 <= min_pixels <= max_pixels, got {self}")

    def check(self, factor: int) -> None:
        """Refuse a resolution that no image can meet with sides in multiples of ``factor``."""
        if self.side is not None and self.side % factor:
            raise ValueError(f"Resolution side={self.side} is not a multiple of patch x merge = {factor}")
        if self.max_pixels is not None and self.max_pixels < factor * factor:
            raise ValueError(f"Resolution max_pixels={self.max_pixels} holds not one {factor}x{factor} patch")


ResolutionLike = int | Resolution
#: a resolution as a function of the producer's step
ResolutionSchedule = Callable[[int], ResolutionLike]


def as_resolution(value: ResolutionLike) -> Resolution:
    """An int is a square side; a :class:`Resolution` is itself."""
    if isinstance(value, Resolution):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Resolution(side=value)
    raise TypeError(f"a resolution is an int (square side) or a Resolution, got {value!r}")


@dataclass(frozen=True)
class StepResolution:
    """``values[i]`` for ``boundaries[i-1] <= step < boundaries[i]``."""

    boundaries: tuple[int, ...]
    values: tuple[Resolution, ...]

    def __call__(self, step: int) -> Resolution:
        return self.values[bisect_right(self.boundaries, step)]


def resolution_schedule(boundaries: Sequence[int], values: Sequence[ResolutionLike]) -> StepResolution:
    """Piecewise-constant resolution: ``values[0]`` before ``boundaries[0]``, and so on."""
    bounds = tuple(int(b) for b in boundaries)
    if len(values) != len(bounds) + 1:
        raise ValueError(f"resolution_schedule needs len(values) == len(boundaries) + 1, got {len(values)} "
                         f"and {len(bounds)}")
    if any(b <= a for a, b in zip(bounds, bounds[1:])) or (bounds and bounds[0] < 1):
        raise ValueError(f"resolution_schedule boundaries must be strictly increasing steps >= 1, got {list(bounds)}")
    return StepResolution(bounds, tuple(as_resolution(v) for v in values))


def as_resolution_schedule(value: ResolutionLike | ResolutionSchedule) -> Callable[[int], Resolution]:
    """A constant for an int or :class:`Resolution`; a callable's results go through :func:`as_resolution`."""
    if isinstance(value, (int, Resolution)):
        fixed = as_resolution(value)
        return StepResolution((), (fixed,))
    if callable(value):
        schedule = value
        if isinstance(schedule, StepResolution):
            return schedule
        return lambda step: as_resolution(schedule(step))
    raise TypeError(f"resolution must be an int, a Resolution or a callable step -> resolution, got {value!r}")


def target_size(height: int, width: int, resolution: Resolution, *, factor: int) -> tuple[int, int]:
    """``(h, w)`` an image of ``height × width`` is resized to; both multiples of ``factor``.

    See the module docstring. Raises ``ValueError`` for a resolution that
    ``factor`` cannot meet (:meth:`Resolution.check`).
    """
    if height < 1 or width < 1:
        raise MediaError(f"zero-size image ({width}x{height})", "zero_size")
    resolution.check(factor)
    if resolution.side is not None:
        return resolution.side, resolution.side
    top = resolution.max_pixels
    assert top is not None  # side is None (__post_init__)
    f = factor
    h = max(f, round(height / f) * f)
    w = max(f, round(width / f) * f)
    if h * w < resolution.min_pixels:
        s = math.sqrt(resolution.min_pixels / (height * width))
        h = math.ceil(height * s / f) * f
        w = math.ceil(width * s / f) * f
    if h * w > top:  # scale down; rounding down keeps h·w <= top unless a side is held at f
        s = math.sqrt(height * width / top)
        h = max(f, math.floor(height / s / f) * f)
        w = max(f, math.floor(width / s / f) * f)
    if h * w > top:  # an extreme aspect ratio: the shorter side is held at f, the longer gives way
        if h >= w:
            h = max(f, top // (w * f) * f)
        else:
            w = max(f, top // (h * f) * f)
    return h, w


def resize_frames(frames: torch.Tensor, size: tuple[int, int], *, mode: str = "bicubic") -> torch.Tensor:
    """uint8 ``[..., H, W, C]`` resized to ``size = (h, w)`` with antialiasing, as uint8 ``[..., h, w, C]``.

    torch's uint8 antialiased kernels (the fast path of torchvision's resize):
    ``"bilinear"`` is within ±1 of Pillow's ``BILINEAR``; ``"bicubic"`` is
    close to Pillow's ``BICUBIC`` (mean difference well below 1 level; up
    to about ±12 on single pixels at hard edges, where the two clip bicubic
    overshoot at different points).
    """
    if frames.dtype != torch.uint8 or frames.dim() not in (3, 4):
        raise ValueError(f"resize_frames needs uint8 [H, W, C] or [T, H, W, C], got {frames.dtype} {list(frames.shape)}")
    h, w = size
    if tuple(frames.shape[-3:-1]) == (h, w):
        return frames
    batch = frames.unsqueeze(0) if frames.dim() == 3 else frames
    nchw = batch.permute(0, 3, 1, 2)  # a contiguous NHWC tensor is channels_last NCHW: no copy
    out = torch.nn.functional.interpolate(nchw, size=(h, w), mode=mode, antialias=True, align_corners=False)
    out = out.permute(0, 2, 3, 1).contiguous()
    return out[0] if frames.dim() == 3 else out


def patchify(
    frames: torch.Tensor, patch: int, *, temporal_patch: int = 1, merge: int = 1
) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """``(patches [n, C·t·p·p], grid (T/t, H/p, W/p))`` of ``[H, W, C]`` or ``[T, H, W, C]``.

    ``H`` and ``W`` must be multiples of ``patch × merge`` (:func:`target_size`
    makes them so). Values keep their dtype: uint8 in, uint8 out.
    """
    if frames.dim() == 3:
        frames = frames.unsqueeze(0)
    if frames.dim() != 4:
        raise ValueError(f"patchify needs [H, W, C] or [T, H, W, C], got {list(frames.shape)}")
    if patch < 1 or temporal_patch < 1 or merge < 1:
        raise ValueError(f"patch, temporal_patch and merge must be >= 1, got {patch=} {temporal_patch=} {merge=}")
    T, H, W, C = frames.shape
    f = patch * merge
    if H % f or W % f or T < 1:
        raise ValueError(f"patchify: {H}x{W} is not a multiple of patch x merge = {f} (resize first)")
    if T % temporal_patch:  # pad with the last frame (an image: repeated temporal_patch times)
        pad = temporal_patch - T % temporal_patch
        frames = torch.cat([frames, frames[-1:].expand(pad, H, W, C)])
        T += pad
    gt, gh, gw = T // temporal_patch, H // patch, W // patch
    x = frames.reshape(gt, temporal_patch, gh // merge, merge, patch, gw // merge, merge, patch, C)
    # -> (gt, gh/m, gw/m, m_h, m_w, C, t, p_h, p_w): a merge group's patches consecutive, C·t·p·p per patch
    x = x.permute(0, 2, 5, 3, 6, 8, 1, 4, 7)
    return x.reshape(gt * gh * gw, C * temporal_patch * patch * patch), (gt, gh, gw)


def unpatchify(
    patches: torch.Tensor, grid: Sequence[int], patch: int, *, temporal_patch: int = 1, merge: int = 1, channels: int = 3
) -> torch.Tensor:
    """The frames ``[T, H, W, C]`` that :func:`patchify` cut into ``patches`` (padding frames included)."""
    gt, gh, gw = (int(g) for g in grid)
    x = patches.reshape(gt, gh // merge, gw // merge, merge, merge, channels, temporal_patch, patch, patch)
    x = x.permute(0, 6, 1, 3, 7, 2, 4, 8, 5)  # inverse of patchify's permutation
    return x.reshape(gt * temporal_patch, gh * patch, gw * patch, channels)


def image_token_count(grid: Sequence[int], merge: int = 1) -> int:
    """Backbone tokens of one image or clip of patch grid ``(t, h, w)``: ``t·h·w / merge²``."""
    t, h, w = (int(g) for g in grid)
    if h % merge or w % merge:
        raise ValueError(f"grid {tuple(grid)} is not a multiple of merge={merge}")
    return t * h * w // (merge * merge)


def splice_image_tokens(
    tokens: torch.Tensor,
    counts: Sequence[int],
    image_token_id: int,
    *,
    start_id: int | None = None,
    end_id: int | None = None,
) -> torch.Tensor:
    """``tokens`` with ``counts[i]`` copies of ``image_token_id`` at image ``i``'s place.

    Image ``i``'s place is the ``i``-th occurrence of ``image_token_id`` in
    ``tokens`` (a placeholder the caption carries, pre-tokenised or from a
    tokenizer that maps e.g. ``"<image>"`` to it); a caption without
    placeholders gets its images in front. ``start_id`` / ``end_id`` wrap each
    image's run (Qwen2-VL's vision start/end). A caption whose placeholder
    count is neither 0 nor ``len(counts)`` is a :class:`MediaError`
    (``"placeholders"``).
    """
    tokens = tokens.reshape(-1)
    marks = (tokens == image_token_id).nonzero().reshape(-1).tolist()
    if marks and len(marks) != len(counts):
        raise MediaError(f"the caption has {len(marks)} image placeholders for {len(counts)} images", "placeholders")
    if not counts:
        return tokens
    runs = [_run(n, image_token_id, start_id, end_id, tokens.dtype) for n in counts]
    if not marks:
        return torch.cat([*runs, tokens])
    pieces: list[torch.Tensor] = []
    prev = 0
    for mark, run in zip(marks, runs):
        pieces += [tokens[prev:mark], run]
        prev = mark + 1
    pieces.append(tokens[prev:])
    return torch.cat(pieces)


def _run(n: int, token: int, start: int | None, end: int | None, dtype: torch.dtype) -> torch.Tensor:
    run = torch.full((n,), token, dtype=dtype)
    head = [] if start is None else [torch.tensor([start], dtype=dtype)]
    tail = [] if end is None else [torch.tensor([end], dtype=dtype)]
    return torch.cat([*head, run, *tail]) if head or tail else run
