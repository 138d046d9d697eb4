"""Data sources: resumable ``torchdata.nodes`` stages yielding documents ``{"tokens": tensor, ...}``.

- ``TokenFile``: a memory-mapped flat token array (``.npy``/``.bin``) with optional document offsets.
- ``WebDataset``: tar shards (``webdataset`` extra), a ``.npy`` token member or text plus a tokenizer;
  samples with image/video members are yielded undecoded for ``datapipes.DecodeImages``.
- ``Audio``: audio files (FLAC, WAV, MP3, Opus...), undecoded for ``datapipes.DecodeAudio``.
- ``Videos``: video files (``video`` extra), frames sampled at a given fps or count.
- ``LeRobot``: robot episodes in the LeRobot layout (``video``, ``parquet`` extras): state, action chunk and
  a frame per camera per step.
- ``Lance``: a Lance dataset by fragment (``lance`` extra), a token or text column.
- ``Parquet``: Parquet files by row group (``parquet`` extra), a token or text column.

Each takes ``shard=(index, count)``, ``seed``, ``epoch``: its units are permuted by
``(seed, epoch)`` and partitioned contiguously over the shards (seed 001 §5); see
``docs/sources.md``. Names are imported on first use, so importing this package
loads none of the optional libraries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_tgb._lazy import lazy_exports

if TYPE_CHECKING:
    from torch_tgb.sources.audio import Audio
    from torch_tgb.sources._base import ReadOptions, SourceStats, UnitSource
    from torch_tgb.sources.lance import Lance
    from torch_tgb.sources.lerobot import LeRobot
    from torch_tgb.sources.parquet import Parquet
    from torch_tgb.sources.token_file import TokenFile
    from torch_tgb.sources.video import Videos
    from torch_tgb.sources.webdataset import WebDataset

__all__ = ["Audio", "Lance", "LeRobot", "Parquet", "ReadOptions", "SourceStats", "TokenFile", "UnitSource", "Videos",
           "WebDataset"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Audio": "torch_tgb.sources.audio",
        "Lance": "torch_tgb.sources.lance",
        "LeRobot": "torch_tgb.sources.lerobot",
        "Parquet": "torch_tgb.sources.parquet",
        "ReadOptions": "torch_tgb.sources._base",
        "SourceStats": "torch_tgb.sources._base",
        "TokenFile": "torch_tgb.sources.token_file",
        "UnitSource": "torch_tgb.sources._base",
        "Videos": "torch_tgb.sources.video",
        "WebDataset": "torch_tgb.sources.webdataset",
    },
    globals(),
)
