"""Audio: clips from audio files (FLAC, WAV, MP3, Opus, ...), yielded undecoded for ``datapipes.DecodeAudio``.

Each file is one unit and one record: the walker shards, permutes and
resumes over files like every source (a state is a position in that walk,
as for ``Videos``). A record is a sample as ``sources.WebDataset`` yields a
media sample: the file's bytes under its extension (``"flac"``, ``"wav"``,
...), ``"tokens"`` (the transcript's tokens: the UTF-8 sidecar
``<file>.<transcript_ext>`` tokenized with ``tokenizer=``; empty without a
tokenizer or a sidecar) and ``"__key__"`` (the path). Decoding is left to
``datapipes.DecodeAudio``, so audio from tar shards (``sources.WebDataset``:
audio members are media members) and from Parquet/Arrow byte columns
(``sources.Parquet(..., extra=["audio"])``) goes through the same stage.

``paths``: files, directories (their audio files, sorted) or local glob
patterns. A file whose extension is not one of
``transforms.audio.AUDIO_EXTS`` is refused when the source is made; a file
larger than ``max_bytes`` is never read: it is a bad record (``on_error``,
reason ``too_long``). Needs nothing beyond the core to read; decoding needs
the ``audio`` extra (``av``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from torch_tgb.errors import MediaError, SourceError
from torch_tgb.sources._base import Document, ReadOptions
from torch_tgb.sources._inputs import Tokenizer, glob_matches
from torch_tgb.sources._files import FileSource
from torch_tgb.sources._sidecar import sidecar_tokens
from torch_tgb.transforms.audio import AUDIO_EXTS

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Audio"]


class Audio(FileSource):
    """Undecoded clips of audio files; units are files. See the module docstring."""

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        tokenizer: Tokenizer | None = None,
        transcript_ext: str = "txt",
        max_bytes: int = 1 << 30,
        **options: Unpack[ReadOptions],
    ) -> None:
        super().__init__(**options)
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.paths = _expand(paths)
        for path in self.paths:
            if _ext(path) not in AUDIO_EXTS:
                raise SourceError(f"{path}: not an audio file extension; expected one of {list(AUDIO_EXTS)}")
            if not os.path.isfile(path):
                raise SourceError(f"{path}: no such audio file")
        self.tokenizer, self.transcript_ext, self.max_bytes = tokenizer, transcript_ext, max_bytes
        self._set_num_units(len(self.paths), f"Audio({len(self.paths)} files)")

    def _record(self, path: str) -> Iterator[Document | SourceError]:
        size = os.path.getsize(path)
        if size > self.max_bytes:  # never read: a size is not a reason to allocate
            yield MediaError(f"{path}: {size} bytes > max_bytes={self.max_bytes}", "too_long")
            return
        with open(path, "rb") as f:
            data = f.read()
        tokens = sidecar_tokens(path, self.transcript_ext, self.tokenizer)
        if isinstance(tokens, SourceError):
            yield tokens
            return
        yield {_ext(path): data, "tokens": tokens, "__key__": path}


def _ext(path: str) -> str:
    return os.path.splitext(path)[1].lstrip(".").lower()


def _expand(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """Files of ``paths`` (one or a list): a directory's audio files and a glob pattern's matches, sorted."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: list[str] = []
    for item in (os.fspath(i) for i in items):
        matched = glob_matches(item, "audio file")
        if matched is not None:
            out += matched
        elif os.path.isdir(item):
            found = sorted(name for name in os.listdir(item) if _ext(name) in AUDIO_EXTS)
            if not found:
                raise SourceError(f"{item}: no audio files ({', '.join(AUDIO_EXTS)}) in the directory")
            out += [os.path.join(item, name) for name in found]
        else:
            out.append(item)
    return out
