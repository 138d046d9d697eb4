"""The audio stages of a speech producer: decode + resample (+ log-mel features), splice audio tokens.

Both are :class:`SampleMap` stages (bad-input policy ``on_error="skip"|"raise"``,
skips counted by reason in ``stats().skipped_by_reason``, state = the
source's state + counters: a resumed producer continues from the source's
position in its walk, as the video path does). A sample is a dict as
``sources.Audio`` or ``sources.WebDataset`` yields media (raw bytes under
their extension keys, ``"tokens"``, ``"__key__"``), or a Parquet/Arrow row
with the audio in a column (``field=``: bytes, or a Hugging Face ``Audio``
struct ``{"bytes": ..., "path": ...}``).

1. :class:`DecodeAudio` adds, per sample (its clips in member order, raw
   bytes dropped), the ragged fields ``PackSamples`` carries into rows:

   - ``"audio_values"`` float32 ``[Σ samples, channels]`` at ``sample_rate``
     (``waveform=False`` leaves it out) and ``"audio_lengths"`` int64
     ``[clips]`` (samples of each clip);
   - with ``features=transforms.LogMel(...)``: ``"audio_features"`` float32
     ``[Σ frames, n_mels]`` and ``"audio_feature_lengths"`` int64 ``[clips]``;
   - ``"__sample_rate__"`` (an int, not a tensor: not batched), for the
     bucketing key ``duration``.

2. :class:`SpliceAudioTokens`: ``"tokens"`` with each clip's run of
   ``audio_token_id`` (``transforms.audio_token_count`` of it) at its
   placeholder, or in front of a transcript without one.

Then ``PackSamples(..., ragged_keys=decode.ragged_keys)`` and ``GlobalBatches``
(``cost=transforms.VLMCost()`` prices each clip's encoder positions), or
``BucketBatches(key="duration")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchdata.nodes import BaseNode

from torch_tgb._on_error import OnError
from torch_tgb.datapipes.produce._sample_map import Document, SampleMap
from torch_tgb.errors import MediaError
from torch_tgb.transforms.audio import AUDIO_EXTS, CHANNEL_LAYOUTS, decode_audio
from torch_tgb.transforms.audio_features import LogMel, audio_token_count
from torch_tgb.transforms.media import media_keys
from torch_tgb.transforms.vision import splice_image_tokens

__all__ = ["DecodeAudio", "SpliceAudioTokens"]


class DecodeAudio(SampleMap):
    """Decodes, resamples and optionally featurises the audio of each sample; see the module docstring.

    ``sample_rate`` / ``layout`` (``"mono"``, ``"stereo"``): the clip's rate and
    channels after PyAV's resampler. ``max_seconds`` bounds a clip (from its
    header before decoding where it says; ``"too_long"``). ``exts``: the member
    extensions decoded; ``field``: a column holding the audio instead (or as
    well). ``require=True``: a sample without audio is a ``"no_audio"`` error.
    Reasons counted: ``corrupt``, ``truncated``, ``zero_length``, ``too_long``,
    ``format``, ``no_audio`` (``transforms.audio``).
    """

    def __init__(
        self,
        source: BaseNode[Any],
        *,
        sample_rate: int = 16000,
        layout: str = "mono",
        max_seconds: float | None = 600.0,
        features: LogMel | None = None,
        waveform: bool = True,
        on_error: OnError = "skip",
        exts: Sequence[str] = AUDIO_EXTS,
        field: str | None = None,
        require: bool = True,
    ) -> None:
        super().__init__(source, on_error=on_error)
        if sample_rate < 1 or layout not in CHANNEL_LAYOUTS or (max_seconds is not None and not max_seconds > 0):
            raise ValueError(f"need sample_rate >= 1, layout in {sorted(CHANNEL_LAYOUTS)} and max_seconds > 0 or None, "
                             f"got {sample_rate=} {layout=} {max_seconds=}")
        if features is not None and features.sample_rate != sample_rate:
            raise ValueError(f"features.sample_rate={features.sample_rate} differs from sample_rate={sample_rate}")
        if features is None and not waveform:
            raise ValueError("waveform=False needs features=: the samples would carry no audio")
        self.sample_rate, self.layout, self.max_seconds = sample_rate, layout, max_seconds
        self.features, self.waveform = features, waveform
        self.exts, self.field, self.require = tuple(e.lower() for e in exts), field, require

    @property
    def ragged_keys(self) -> tuple[str, ...]:
        """The ragged fields this stage adds, for ``PackSamples(ragged_keys=...)``."""
        keys = ("audio_values", "audio_lengths") if self.waveform else ("audio_lengths",)
        return keys + (("audio_features", "audio_feature_lengths") if self.features is not None else ())

    def _payloads(self, doc: Document) -> tuple[list[str], list[bytes]]:
        keys = media_keys(doc, self.exts)
        data = [bytes(doc[k]) for k in keys]
        if self.field is not None and doc.get(self.field) is not None:
            value = doc[self.field]
            if isinstance(value, dict):  # a Hugging Face Audio struct
                value = value.get("bytes")
                if value is None:
                    raise MediaError(f"column {self.field!r} holds no bytes (only a path?)", "format")
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise MediaError(f"column {self.field!r} holds {type(value).__name__}, not bytes", "format")
            keys.append(self.field)
            data.append(bytes(value))
        return keys, data

    def _apply(self, doc: Document) -> Document:
        keys, data = self._payloads(doc)
        if not keys and self.require:
            members = sorted(k for k in doc if not k.startswith("__"))
            raise MediaError(f"no audio member (members: {members})", "no_audio")
        clips = [decode_audio(d, sample_rate=self.sample_rate, layout=self.layout, max_seconds=self.max_seconds)
                 for d in data]
        out = {k: v for k, v in doc.items() if k not in keys}  # the raw bytes go: they are large
        channels = CHANNEL_LAYOUTS[self.layout]
        out["audio_lengths"] = torch.tensor([int(c.shape[0]) for c in clips], dtype=torch.int64)
        if self.waveform:
            out["audio_values"] = torch.cat(clips) if clips else torch.zeros((0, channels), dtype=torch.float32)
        if self.features is not None:
            feats = [self.features(c) for c in clips]
            out["audio_features"] = torch.cat(feats) if feats else torch.zeros((0, self.features.n_mels))
            out["audio_feature_lengths"] = torch.tensor([int(f.shape[0]) for f in feats], dtype=torch.int64)
        out["__sample_rate__"] = self.sample_rate
        return out

    def _items(self, doc: Document) -> int:
        return int(doc["audio_lengths"].numel())


class SpliceAudioTokens(SampleMap):
    """Puts each clip's tokens into ``"tokens"``: ``audio_token_count(samples)`` copies of ``audio_token_id``.

    ``hop_length`` / ``downsample``: the features' hop and the encoder's
    reduction (Whisper's conv stride 2 × Qwen2-Audio's pooling 2 = 4: 25
    tokens per second at 16 kHz). At the transcript's placeholders
    (occurrences of ``audio_token_id``), or in front of a transcript with
    none; ``start_id`` / ``end_id`` wrap each run. A placeholder count that
    is neither 0 nor the clips is a ``"placeholders"`` error.
    """

    def __init__(
        self,
        source: BaseNode[Any],
        *,
        audio_token_id: int,
        hop_length: int = 160,
        downsample: int = 4,
        start_id: int | None = None,
        end_id: int | None = None,
        on_error: OnError = "skip",
    ) -> None:
        super().__init__(source, on_error=on_error)
        audio_token_count(0, hop_length=hop_length, downsample=downsample)  # the same checks, now
        self.audio_token_id, self.hop_length, self.downsample = audio_token_id, hop_length, downsample
        self.start_id, self.end_id = start_id, end_id

    @property
    def special_ids(self) -> tuple[int, ...]:
        """The ids this stage puts in: what ``PackSamples(label_ignore_ids=...)`` should not train on."""
        return tuple(sorted({i for i in (self.audio_token_id, self.start_id, self.end_id) if i is not None}))

    def token_counts(self, doc: Document) -> list[int]:
        """Tokens of each clip of a decoded sample."""
        lengths = doc.get("audio_lengths", torch.zeros(0, dtype=torch.int64)).tolist()
        return [audio_token_count(n, hop_length=self.hop_length, downsample=self.downsample) for n in lengths]

    def _apply(self, doc: Document) -> Document:
        tokens = doc.get("tokens", torch.zeros(0, dtype=torch.int64))
        counts = self.token_counts(doc)
        marks = int((tokens == self.audio_token_id).sum())
        if marks and marks != len(counts):  # splice_image_tokens would refuse it too, naming images
            raise MediaError(f"the transcript has {marks} audio placeholders for {len(counts)} clips", "placeholders")
        tokens = splice_image_tokens(tokens, counts, self.audio_token_id, start_id=self.start_id, end_id=self.end_id)
        return {**doc, "tokens": tokens}

    def _items(self, doc: Document) -> int:
        return int(doc["audio_lengths"].numel()) if "audio_lengths" in doc else 0
