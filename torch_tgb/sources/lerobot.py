"""LeRobot: steps of robot episodes in the LeRobot dataset layout (v2), with a frame per camera.

A LeRobot dataset directory holds ``meta/info.json`` (``fps``, ``features``,
``data_path`` and ``video_path`` patterns, ``chunks_size``),
``meta/episodes.jsonl`` (``episode_index``, ``length``, ``tasks``) and, per
episode, a Parquet file of per-frame columns (``observation.state``,
``action``, ``timestamp``, ...) and one video per camera (a feature of dtype
``video``). Units are episodes; records are the episode's frames
``0, stride, 2·stride, ...`` (provenance names a step by that frame index).
A record (a sample for the media stages) is::

    {"images": [uint8 [H, W, 3] per camera],  # the frame on screen at the step's timestamp
     "state": float32 [1, S],                 # observation.state at the step
     "action": float32 [1, action_horizon, A],  # the next action_horizon actions (the last repeated)
     "tokens": the task's tokens (tokenizer=), "__key__": "episode_000003/12"}

so ``ResizeImages`` -> ``Patchify`` -> ``SpliceImageTokens`` -> ``PackSamples(
ragged_keys=(..., "state", "action"))`` make VLA rows of it. Videos are
decoded in one sequential pass per episode and camera (``transforms.media.
frames_at``), a frame converted only when its step is yielded: an episode
streams in constant memory. A resume inside an episode decodes from its start
again and skips. A corrupt video or a Parquet file without the columns fails
that episode's records under ``on_error`` (the first missing step is the
error; the rest of the episode is not read). Needs the ``video`` and
``parquet`` extras.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from torch_tgb.errors import MediaError, SourceError
from torch_tgb.sources._base import Document, ReadOptions, UnitSource, require
from torch_tgb.sources._inputs import Tokenizer, tokenize
from torch_tgb.transforms.media import frames_at

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["LeRobot"]


class LeRobot(UnitSource):
    """Steps of LeRobot episodes with one frame per camera; units are episodes. See the module docstring."""

    RECORD_NAME, UNIT_NAME = "step", "episode"

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        cameras: Sequence[str] | None = None,
        state_key: str = "observation.state",
        action_key: str = "action",
        action_horizon: int = 1,
        stride: int = 1,
        tokenizer: Tokenizer | None = None,
        max_pixels: int = 1920 * 1080,
        **options: Unpack[ReadOptions],
    ) -> None:
        super().__init__(**options)
        self.root = os.fspath(root)
        if action_horizon < 1 or stride < 1:
            raise ValueError(f"action_horizon and stride must be >= 1, got {action_horizon=} {stride=}")
        try:
            with open(os.path.join(self.root, "meta", "info.json"), encoding="utf-8") as f:
                self.info = json.load(f)
            with open(os.path.join(self.root, "meta", "episodes.jsonl"), encoding="utf-8") as f:
                self.episodes = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError) as e:
            raise SourceError(f"{self.root}: not a LeRobot dataset (meta/info.json, meta/episodes.jsonl): {e}") from e
        features = self.info.get("features", {})
        videos = sorted(k for k, v in features.items() if isinstance(v, dict) and v.get("dtype") == "video")
        self.cameras = tuple(videos if cameras is None else cameras)
        unknown = sorted(set(self.cameras) - set(videos))
        if unknown:
            raise SourceError(f"{self.root}: no video feature {unknown}; the dataset has {videos}")
        self.state_key, self.action_key = state_key, action_key
        self.action_horizon, self.stride = action_horizon, stride
        self.tokenizer, self.max_pixels = tokenizer, max_pixels
        self._set_num_units(len(self.episodes), self.root)

    def _unit_name(self, unit: int) -> str:
        return f"{self.root} episode {self._episode(unit)}"

    def _unit_length(self, unit: int) -> int | None:
        return -(-int(self.episodes[unit]["length"]) // self.stride)

    def _record_id(self, unit: int, index: int) -> tuple[int, int, int]:
        """A step's record in provenance is its frame's index in the episode (what ``__key__`` names), so a frame
        has one name whatever ``stride`` read it."""
        return unit, index * self.stride, 0

    def _episode(self, unit: int) -> int:
        return int(self.episodes[unit]["episode_index"])

    def _path(self, pattern_key: str, unit: int, **extra: str) -> str:
        episode = self._episode(unit)
        chunk = episode // int(self.info.get("chunks_size", 1000))
        pattern = self.info[pattern_key]
        return os.path.join(self.root, pattern.format(episode_chunk=chunk, episode_index=episode, **extra))

    def _records(self, unit: int, start: int) -> Iterator[Document | SourceError]:
        pq = require("pyarrow.parquet", "parquet")
        episode, name = self._episode(unit), self._unit_name(unit)
        try:
            table = pq.read_table(self._path("data_path", unit), columns=[self.state_key, self.action_key, "timestamp"])
            state = np.asarray(table.column(self.state_key).to_pylist(), dtype=np.float32)
            action = np.asarray(table.column(self.action_key).to_pylist(), dtype=np.float32)
            stamps = np.asarray(table.column("timestamp").to_pylist(), dtype=np.float64)
        except Exception as e:  # a missing file or column, ragged lists: this episode is a bad record
            yield SourceError(f"{name}: cannot read its frames: {e}")
            return
        steps = list(range(start * self.stride, len(stamps), self.stride))
        task = self._task(unit, name)
        if isinstance(task, SourceError):
            yield task
            return
        cameras = []
        for camera in self.cameras:
            with open(self._path("video_path", unit, video_key=camera), "rb") as f:
                cameras.append(frames_at(f.read(), [float(stamps[i]) for i in steps], max_pixels=self.max_pixels))
        for i in steps:
            try:
                images = [torch.from_numpy(next(frames)) for frames in cameras]
            except MediaError as e:
                yield MediaError(f"{name} step {i}: {e}", e.reason)
                return
            last = min(i + self.action_horizon, len(action)) - 1
            chunk = action[[min(k, last) for k in range(i, i + self.action_horizon)]]
            yield {
                "images": images,
                "state": torch.from_numpy(state[i : i + 1].copy()),
                "action": torch.from_numpy(chunk[None].copy()),
                "tokens": task,
                "__key__": f"episode_{episode:06d}/{i}",
            }

    def _task(self, unit: int, name: str) -> torch.Tensor | SourceError:
        tasks = self.episodes[unit].get("tasks") or []
        if self.tokenizer is None or not tasks:
            return torch.zeros(0, dtype=torch.int64)
        return tokenize([str(tasks[0])], self.tokenizer, lambda _: f"{name} task")[0]
