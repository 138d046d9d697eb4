"""The media stages of a VLM producer: decode, resize to a schedule, patchify, splice image tokens.

Each is a :class:`SampleMap` (bad-input policy ``on_error="skip"|"raise"``,
counters in ``stats()``, state = the source's state + counters) over the pure
functions of ``transforms.media`` and ``transforms.vision``. A sample is a
dict as ``sources.WebDataset`` yields it for media: raw bytes under their
extension keys (``"jpg"``, ``"0.png"``, ``"mp4"``), ``"tokens"`` (the
caption's tokens, maybe empty) and ``"__key__"``. The stages add, in order:

1. :class:`DecodeImages`: ``"images"``, a list of uint8 ``[H, W, 3]`` (members
   in key order; their raw bytes are dropped). :class:`DecodeVideos`:
   ``"videos"``, a list of uint8 ``[T, H, W, 3]`` frame stacks.
2. :class:`ResizeImages`: every image (and every clip's frames) to
   ``target_size`` under the resolution of the current step.
3. :class:`Patchify`: ``"pixel_values"`` uint8 ``[Σ patches, C·t·p·p]`` and
   ``"image_grid_thw"`` int64 ``[n_images, 3]`` (for clips
   ``"pixel_values_videos"`` / ``"video_grid_thw"``); the frames are dropped.
4. :class:`SpliceImageTokens`: ``"tokens"`` with each image's run of
   ``image_token_id`` at its placeholder (or in front).

Then ``PackSamples`` packs the samples into rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchdata.nodes import BaseNode

from torch_tgb._on_error import OnError
from torch_tgb.datapipes.produce._sample_map import Document, SampleMap
from torch_tgb.errors import MediaError
from torch_tgb.transforms.media import (
    DEFAULT_MAX_PIXELS,
    IMAGE_EXTS,
    IMAGE_FORMATS,
    VIDEO_EXTS,
    decode_image,
    decode_video,
    frame_times,
    media_keys,
)
from torch_tgb.transforms.vision import (
    ResolutionLike,
    ResolutionSchedule,
    as_resolution,
    as_resolution_schedule,
    image_token_count,
    patchify,
    resize_frames,
    splice_image_tokens,
    target_size,
)

__all__ = ["DecodeImages", "DecodeVideos", "Patchify", "ResizeImages", "SpliceImageTokens"]


class _DecodeMembers(SampleMap):
    """Decodes the members of each sample whose extension is in ``exts`` into the list under ``OUT_KEY``."""

    OUT_KEY = ""
    MISSING = ""  # the reason of a sample without such a member, when ``require``

    def __init__(self, source: BaseNode[Any], *, on_error: OnError, exts: Sequence[str], require: bool) -> None:
        super().__init__(source, on_error=on_error)
        self.exts, self.require = tuple(e.lower() for e in exts), require

    def _decode(self, data: bytes) -> torch.Tensor:
        raise NotImplementedError

    def _apply(self, doc: Document) -> Document:
        keys = media_keys(doc, self.exts)
        if not keys and self.require:
            members = sorted(k for k in doc if not k.startswith("__"))
            raise MediaError(f"no {self.OUT_KEY[:-1]} member (members: {members})", self.MISSING)
        decoded = [self._decode(bytes(doc[k])) for k in keys]
        out = {k: v for k, v in doc.items() if k not in keys}  # the raw bytes go: they are large
        out[self.OUT_KEY] = list(doc.get(self.OUT_KEY, [])) + decoded
        return out

    def _items(self, doc: Document) -> int:
        return len(doc[self.OUT_KEY])


class DecodeImages(_DecodeMembers):
    """Decodes the image members of each sample into ``"images"``; see the module docstring.

    ``max_pixels`` bounds an image by its header before decoding (default
    8192²); ``formats`` are the Pillow formats allowed; ``decoder="auto"``
    uses simplejpeg for JPEG where installed, ``"pillow"`` always Pillow.
    ``require=True`` (default) makes a sample without an image member (a
    caption without image) a ``"no_image"`` error; with ``False`` it passes
    with ``"images": []``.
    """

    OUT_KEY, MISSING = "images", "no_image"

    def __init__(
        self,
        source: BaseNode[Any],
        *,
        on_error: OnError = "skip",
        max_pixels: int = DEFAULT_MAX_PIXELS,
        formats: Sequence[str] = IMAGE_FORMATS,
        decoder: str = "auto",
        exts: Sequence[str] = IMAGE_EXTS,
        require: bool = True,
    ) -> None:
        super().__init__(source, on_error=on_error, exts=exts, require=require)
        if decoder not in ("auto", "pillow") or max_pixels < 1:
            raise ValueError(f"need decoder 'auto' or 'pillow' and max_pixels >= 1, got {decoder=} {max_pixels=}")
        self.max_pixels, self.formats, self.decoder = max_pixels, tuple(formats), decoder

    def _decode(self, data: bytes) -> torch.Tensor:
        return decode_image(data, max_pixels=self.max_pixels, formats=self.formats, decoder=self.decoder)


class DecodeVideos(_DecodeMembers):
    """Decodes the video members of each sample into ``"videos"``: frames at ``fps`` or ``num_frames``.

    ``max_pixels`` bounds a frame (by the stream header), ``max_frames`` the
    frames kept per clip. A sample without a video member passes with
    ``"videos": []`` unless ``require=True`` (then ``"no_video"``).
    """

    OUT_KEY, MISSING = "videos", "no_video"

    def __init__(
        self,
        source: BaseNode[Any],
        *,
        fps: float | None = None,
        num_frames: int | None = None,
        on_error: OnError = "skip",
        max_pixels: int = 1920 * 1080,
        max_frames: int = 256,
        exts: Sequence[str] = VIDEO_EXTS,
        require: bool = False,
    ) -> None:
        super().__init__(source, on_error=on_error, exts=exts, require=require)
        if (fps is None) == (num_frames is None):
            raise ValueError(f"DecodeVideos needs exactly one of fps= and num_frames=, got {fps=} {num_frames=}")
        frame_times(1.0, fps=fps, num_frames=num_frames, max_frames=max_frames)  # the same checks, now
        self.fps, self.num_frames, self.max_pixels, self.max_frames = fps, num_frames, max_pixels, max_frames

    def _decode(self, data: bytes) -> torch.Tensor:
        return decode_video(data, fps=self.fps, num_frames=self.num_frames, max_pixels=self.max_pixels,
                            max_frames=self.max_frames)


class ResizeImages(SampleMap):
    """Resizes ``"images"`` and ``"videos"`` to the resolution of the current step.

    ``resolution``: an int (square side), a ``transforms.Resolution`` (pixel
    budget, aspect kept) or a schedule ``step -> resolution``
    (``transforms.vision.resolution_schedule``). Sides become multiples of
    ``patch × merge``. **The step** is counted here, like ``Mix`` counts it:
    ``step = samples pulled // documents_per_step`` (set it to the samples
    of one global batch); it is part of the state, so a resumed producer
    resizes exactly as the uninterrupted one. ``mode``: ``"bicubic"`` (within
    ±2 of Pillow's BICUBIC) or ``"bilinear"`` (equal to Pillow's BILINEAR).
    """

    def __init__(
        self,
        source: BaseNode[Any],
        resolution: ResolutionLike | ResolutionSchedule,
        *,
        patch: int = 14,
        merge: int = 1,
        documents_per_step: int = 1,
        mode: str = "bicubic",
        on_error: OnError = "skip",
    ) -> None:
        super().__init__(source, on_error=on_error)
        if patch < 1 or merge < 1 or documents_per_step < 1 or mode not in ("bicubic", "bilinear"):
            raise ValueError(f"need patch, merge, documents_per_step >= 1 and mode bicubic|bilinear, got "
                             f"{patch=} {merge=} {documents_per_step=} {mode=}")
        self.schedule = as_resolution_schedule(resolution)
        self.factor = patch * merge
        self.schedule(0).check(self.factor)  # fail now, not at the first image
        self.documents_per_step = documents_per_step
        self.mode = mode

    @property
    def step(self) -> int:
        """The step the next sample is resized for."""
        return self.inputs // self.documents_per_step

    def _apply(self, doc: Document) -> Document:
        resolution = as_resolution(self.schedule(self.step))
        out = dict(doc)
        for key in ("images", "videos"):
            if key in doc:
                out[key] = [self._resize(x, resolution) for x in doc[key]]
        return out

    def _resize(self, frames: torch.Tensor, resolution: Any) -> torch.Tensor:
        h, w = target_size(int(frames.shape[-3]), int(frames.shape[-2]), resolution, factor=self.factor)
        return resize_frames(frames, (h, w), mode=self.mode)

    def _items(self, doc: Document) -> int:
        return len(doc.get("images", ())) + len(doc.get("videos", ()))


class Patchify(SampleMap):
    """Cuts ``"images"`` / ``"videos"`` into patches; see the module docstring.

    Always emits ``"pixel_values"`` ``[n, 3·t·p·p]`` and ``"image_grid_thw"``
    ``[n_images, 3]`` (``[0, ...]`` for a sample without images, so every
    sample has the same keys); the video keys when the sample has
    ``"videos"``.
    """

    KEYS = {"images": ("pixel_values", "image_grid_thw"), "videos": ("pixel_values_videos", "video_grid_thw")}

    def __init__(
        self,
        source: BaseNode[Any],
        *,
        patch: int = 14,
        temporal_patch: int = 1,
        merge: int = 1,
        channels: int = 3,
        on_error: OnError = "skip",
    ) -> None:
        super().__init__(source, on_error=on_error)
        if min(patch, temporal_patch, merge, channels) < 1:
            raise ValueError(f"patch, temporal_patch, merge, channels must be >= 1, got "
                             f"{patch=} {temporal_patch=} {merge=} {channels=}")
        self.patch, self.temporal_patch, self.merge, self.channels = patch, temporal_patch, merge, channels

    @property
    def patch_dim(self) -> int:
        """Values per patch: ``C·t·p·p``."""
        return self.channels * self.temporal_patch * self.patch * self.patch

    def _apply(self, doc: Document) -> Document:
        out = {k: v for k, v in doc.items() if k not in self.KEYS}
        for key, (values_key, grid_key) in self.KEYS.items():
            if key not in doc and key == "videos":
                continue
            values, grids = [], []
            for x in doc.get(key, ()):
                if x.shape[-1] != self.channels:
                    raise MediaError(f"{key[:-1]} of shape {list(x.shape)} has not {self.channels} channels", "shape")
                try:
                    p, grid = patchify(x, self.patch, temporal_patch=self.temporal_patch, merge=self.merge)
                except ValueError as e:
                    raise MediaError(str(e), "shape") from e
                values.append(p)
                grids.append(grid)
            out[values_key] = torch.cat(values) if values else torch.zeros((0, self.patch_dim), dtype=torch.uint8)
            out[grid_key] = torch.tensor(grids, dtype=torch.int64).reshape(-1, 3)
        return out

    def _items(self, doc: Document) -> int:
        return sum(int(doc[g].shape[0]) for _, g in self.KEYS.values() if g in doc)


class SpliceImageTokens(SampleMap):
    """Puts each image's tokens into ``"tokens"``: ``t·h·w / merge²`` copies of ``image_token_id``.

    At the caption's placeholders (occurrences of ``image_token_id``; a clip's
    of ``video_token_id``, which defaults to ``image_token_id``: then images
    come before clips in placeholder order), or in front of a caption with
    none. ``start_id`` / ``end_id`` wrap each run. A placeholder count that
    matches neither 0 nor the images is a ``"placeholders"`` error.
    """

    def __init__(
        self,
        source: BaseNode[Any],
        *,
        image_token_id: int,
        video_token_id: int | None = None,
        merge: int = 1,
        start_id: int | None = None,
        end_id: int | None = None,
        on_error: OnError = "skip",
    ) -> None:
        super().__init__(source, on_error=on_error)
        if merge < 1:
            raise ValueError(f"merge must be >= 1, got {merge}")
        self.image_token_id = image_token_id
        self.video_token_id = image_token_id if video_token_id is None else video_token_id
        self.merge, self.start_id, self.end_id = merge, start_id, end_id

    @property
    def special_ids(self) -> tuple[int, ...]:
        """The ids this stage puts in: what ``PackSamples(label_ignore_ids=...)`` should not train on."""
        ids = (self.image_token_id, self.video_token_id, self.start_id, self.end_id)
        return tuple(sorted({i for i in ids if i is not None}))

    def _apply(self, doc: Document) -> Document:
        tokens = doc.get("tokens", torch.zeros(0, dtype=torch.int64))
        images = [image_token_count(g, self.merge) for g in doc.get("image_grid_thw", torch.zeros(0, 3)).tolist()]
        clips = [image_token_count(g, self.merge) for g in doc.get("video_grid_thw", torch.zeros(0, 3)).tolist()]
        wrap = {"start_id": self.start_id, "end_id": self.end_id}
        if self.video_token_id == self.image_token_id:
            tokens = splice_image_tokens(tokens, images + clips, self.image_token_id, **wrap)
        else:
            tokens = splice_image_tokens(tokens, images, self.image_token_id, **wrap)
            tokens = splice_image_tokens(tokens, clips, self.video_token_id, **wrap)
        return {**doc, "tokens": tokens}

    def _items(self, doc: Document) -> int:
        return sum(int(doc[g].shape[0]) for g in ("image_grid_thw", "video_grid_thw") if g in doc)
