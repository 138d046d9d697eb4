"""The pictures of ``tgb peek``: a batch's images and video frames, reassembled from patches, on one sheet.

A TGB carries each image as its patches (``pixel_values`` ``[n, C·t·p·p]``
uint8, rows joined, ``pixel_values_offsets``) and its patch grid
(``image_grid_thw`` ``[k, 3]``, ``image_grid_thw_offsets``); clips the same
under ``pixel_values_videos`` / ``video_grid_thw``. :func:`batch_media`
cuts them back into frames with ``transforms.unpatchify``, the exact inverse
of the producer's ``Patchify`` (so a frame equals the producer's resized
image, pixel for pixel). The patch size, temporal patch and merge are not
stored: they are given, or inferred (the patch from the values per patch,
the merge as the one that makes the first image smoothest, which a wrong
merge never does: it shuffles blocks).

:func:`contact_sheet` places the frames unscaled on one canvas, each under a
label, and returns where each went, so a test (or a user) can crop a frame
back out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from torch_tgb.transforms.vision import unpatchify

if TYPE_CHECKING:
    from PIL import Image

__all__ = ["Frame", "PatchGeometry", "batch_media", "contact_sheet", "infer_geometry"]

#: (values key, grid key, kind) of the media a batch may carry
MEDIA_KEYS = (("pixel_values", "image_grid_thw", "image"), ("pixel_values_videos", "video_grid_thw", "video"))


@dataclass(frozen=True)
class PatchGeometry:
    """How patches were cut: ``patch`` pixels square, ``temporal_patch`` frames deep, ``merge`` x ``merge`` a token."""

    patch: int
    temporal_patch: int = 1
    merge: int = 1
    channels: int = 3


@dataclass(frozen=True)
class Frame:
    """One picture of the batch: ``kind`` (image/video) ``index`` of row ``row``, frame ``frame``; ``[H, W, C]``."""

    row: int
    kind: str
    index: int
    frame: int
    pixels: torch.Tensor

    @property
    def label(self) -> str:
        h, w = int(self.pixels.shape[0]), int(self.pixels.shape[1])
        what = f"#{self.index}" if self.kind == "image" else f"clip{self.index} f{self.frame}"
        return f"r{self.row} {what} {w}x{h}"


def _patch_sizes(dim: int, channels: int) -> list[tuple[int, int]]:
    """The (patch, temporal_patch) pairs with ``channels·t·p·p == dim``, smallest t first."""
    out = []
    for t in range(1, 9):
        if dim % (channels * t):
            continue
        p = math.isqrt(dim // (channels * t))
        if p * p * channels * t == dim:
            out.append((p, t))
    return out


def _roughness(frames: torch.Tensor) -> float:
    """Mean absolute difference between neighbouring pixels of the first frame (low for a natural image)."""
    x = frames[0].to(torch.float32)
    return float((x[1:] - x[:-1]).abs().mean() + (x[:, 1:] - x[:, :-1]).abs().mean())


def infer_geometry(values: torch.Tensor, grid: Sequence[int], *, patch: int | None = None,
                   temporal_patch: int | None = None, merge: int | None = None, channels: int = 3) -> PatchGeometry:
    """The geometry of ``values`` (one image's patches, grid ``(t, h, w)``): what is given, the rest inferred.

    Raises ValueError when no patch size fits the values per patch.
    """
    dim = int(values.shape[1])
    sizes = [(p, t) for p, t in _patch_sizes(dim, channels)
             if (patch is None or p == patch) and (temporal_patch is None or t == temporal_patch)]
    if not sizes:
        raise ValueError(f"{dim} values per patch fit no {channels}·t·p·p (give --patch / --temporal-patch)")
    p, t = sizes[0]
    if merge is not None:
        return PatchGeometry(p, t, merge, channels)
    _, gh, gw = (int(g) for g in grid)
    candidates = [m for m in (1, 2, 4, 8) if gh % m == 0 and gw % m == 0]
    if len(candidates) == 1:
        return PatchGeometry(p, t, 1, channels)
    best = min(candidates, key=lambda m: _roughness(unpatchify(values, grid, p, temporal_patch=t, merge=m,
                                                                channels=channels)))
    return PatchGeometry(p, t, best, channels)


def _row_spans(batch: Mapping[str, torch.Tensor], key: str, rows: int) -> list[tuple[int, int]]:
    offsets = batch.get(f"{key}_offsets")
    if offsets is None:  # one row, or a reader that joined nothing
        return [(0, int(batch[key].shape[0]))] + [(0, 0)] * (rows - 1)
    offs = [int(o) for o in offsets.tolist()]
    return list(zip(offs[:-1], offs[1:]))


def batch_media(batch: Mapping[str, torch.Tensor], *, rows: int, geometry: Mapping[str, int | None] | None = None,
                limit: int = 64) -> tuple[list[Frame], dict[str, PatchGeometry]]:
    """The batch's images and video frames (at most ``limit``), in row order, and the geometry used per kind."""
    given = dict(geometry or {})
    frames: list[Frame] = []
    used: dict[str, PatchGeometry] = {}
    for values_key, grid_key, kind in MEDIA_KEYS:
        if values_key not in batch or grid_key not in batch:
            continue
        values, grids = batch[values_key], batch[grid_key]
        value_spans, grid_spans = _row_spans(batch, values_key, rows), _row_spans(batch, grid_key, rows)
        for row, ((v0, _), (g0, g1)) in enumerate(zip(value_spans, grid_spans)):
            offset = v0
            for index, grid in enumerate(grids[g0:g1].tolist()):
                n = int(grid[0] * grid[1] * grid[2])
                patches = values[offset : offset + n]
                offset += n
                if len(frames) >= limit:
                    continue
                if kind not in used:
                    used[kind] = infer_geometry(patches, grid, patch=given.get("patch"),
                                                temporal_patch=given.get("temporal_patch"), merge=given.get("merge"))
                g = used[kind]
                stack = unpatchify(patches, grid, g.patch, temporal_patch=g.temporal_patch, merge=g.merge,
                                   channels=g.channels)
                keep = stack[:1] if kind == "image" else stack
                frames += [Frame(row, kind, index, f, keep[f]) for f in range(len(keep))][: limit - len(frames)]
    return frames, used


def contact_sheet(frames: Sequence[Frame], *, width: int = 1024, pad: int = 6,
                  label_height: int = 14) -> tuple[Image.Image, list[dict[str, Any]]]:
    """One RGB canvas with every frame unscaled under its label, and each frame's box ``{x, y, w, h, ...}``."""
    from PIL import Image, ImageDraw

    boxes: list[dict[str, Any]] = []
    x = y = pad
    line = 0
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    slots = [max(int(f.pixels.shape[1]), int(measure.textlength(f.label)) + 2) for f in frames]
    width = max([width, *(slot + 2 * pad for slot in slots)])
    for f, slot in zip(frames, slots):
        h, w = int(f.pixels.shape[0]), int(f.pixels.shape[1])
        if x + slot + pad > width and x > pad:
            x, y, line = pad, y + line + label_height + pad, 0
        boxes.append({"row": f.row, "kind": f.kind, "index": f.index, "frame": f.frame, "label": f.label,
                      "x": x, "y": y + label_height, "w": w, "h": h})
        x += slot + pad
        line = max(line, h)
    height = y + line + label_height + pad
    sheet = Image.new("RGB", (width, max(height, 2 * pad + label_height)), (32, 32, 32))
    draw = ImageDraw.Draw(sheet)
    for f, box in zip(frames, boxes):
        draw.text((box["x"], box["y"] - label_height + 1), f.label, fill=(230, 230, 230))
        pixels = f.pixels.to(torch.uint8)
        rgb = pixels[..., :3] if pixels.shape[-1] >= 3 else pixels[..., :1].expand(*pixels.shape[:-1], 3)
        sheet.paste(Image.fromarray(rgb.contiguous().numpy()), (box["x"], box["y"]))
    return sheet, boxes


def geometry_json(used: Mapping[str, PatchGeometry]) -> dict[str, dict[str, int]]:
    return {kind: asdict(g) for kind, g in used.items()}
