"""Videos: clips from video files (mp4, webm, ...), frames sampled at a given fps or count.

Each file is one unit and one record: the walker shards, permutes and
resumes over files like every source. A record is
``{"videos": [uint8 [T, H, W, 3]], "tokens": caption tokens, "__key__": path}``,
decoded with PyAV (``transforms.media.decode_video``: the stream's size is
checked against ``max_pixels`` before decoding, at most ``max_frames``
frames are kept). The caption is the sidecar ``<file>.<caption_ext>`` (UTF-8,
tokenized with ``tokenizer=``); without a tokenizer or a sidecar the tokens
are empty. A corrupt, truncated, empty, oversized or stream-less file is a bad
record under ``on_error`` (``"skip_and_count"`` counts it in
``stats().skipped``). Needs the ``video`` extra (``av``).

The frames can then go through ``datapipes.ResizeImages`` -> ``Patchify``
(``temporal_patch=``) -> ``SpliceImageTokens`` like images.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from torch_tgb.errors import MediaError, SourceError
from torch_tgb.sources._base import Document, ReadOptions
from torch_tgb.sources._inputs import Tokenizer
from torch_tgb.sources._files import FileSource
from torch_tgb.sources._sidecar import sidecar_tokens
from torch_tgb.transforms.media import decode_video, frame_times

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Videos"]


class Videos(FileSource):
    """Sampled frames of video files; units are files. See the module docstring."""

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        fps: float | None = None,
        num_frames: int | None = None,
        tokenizer: Tokenizer | None = None,
        caption_ext: str = "txt",
        max_pixels: int = 1920 * 1080,
        max_frames: int = 256,
        **options: Unpack[ReadOptions],
    ) -> None:
        super().__init__(**options)
        if (fps is None) == (num_frames is None):
            raise ValueError(f"Videos needs exactly one of fps= and num_frames=, got {fps=} {num_frames=}")
        frame_times(1.0, fps=fps, num_frames=num_frames, max_frames=max_frames)  # the same checks, now
        self.paths = [os.fspath(p) for p in paths]
        for path in self.paths:
            if not os.path.isfile(path):
                raise SourceError(f"{path}: no such video file")
        self.fps, self.num_frames = fps, num_frames
        self.tokenizer, self.caption_ext = tokenizer, caption_ext
        self.max_pixels, self.max_frames = max_pixels, max_frames
        self._set_num_units(len(self.paths), f"Videos({len(self.paths)} files)")

    def _record(self, path: str) -> Iterator[Document | SourceError]:
        with open(path, "rb") as f:
            data = f.read()
        try:
            frames = decode_video(data, fps=self.fps, num_frames=self.num_frames, max_pixels=self.max_pixels,
                                  max_frames=self.max_frames)
        except MediaError as e:  # a bad record, for on_error
            yield MediaError(f"{path}: {e}", e.reason)
            return
        tokens = sidecar_tokens(path, self.caption_ext, self.tokenizer)
        if isinstance(tokens, SourceError):
            yield tokens
            return
        yield {"videos": [frames], "tokens": tokens, "__key__": path}
