"""Log-mel features of a waveform, computed on the producer, and the audio tokens a clip becomes.

Pure functions (torch in, torch out). :class:`LogMel` is the feature
extractor speech encoders share (Whisper, Qwen2-Audio, most CTC/RNN-T
recipes): a Hann-windowed STFT (``n_fft``, ``hop_length``; ``center``:
reflect-padded by ``n_fft // 2`` on both sides), the power spectrum, a
Slaney mel filterbank (librosa's default: Slaney's mel scale, each filter
normalised to unit area), then ``log10(max(mel, floor))``. Whisper's own
range clamp and scaling (``max(x, x.max() - 8)``, ``(x + 4) / 4``) is
``whisper_scale=True``. Frames: ``1 + samples // hop_length`` (the last one
is kept). A multi-channel clip is averaged to mono first.

:func:`audio_token_count` is the number of backbone tokens a clip's
features become after the encoder's downsampling (Whisper's stride-2 conv,
then Qwen2-Audio's 2x pooling: ``downsample=4``, 25 tokens per second at
16 kHz), what ``SpliceAudioTokens`` splices in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

__all__ = ["LogMel", "audio_token_count", "hz_to_mel", "mel_filters", "mel_frames", "mel_to_hz"]

#: Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above
_F_SP, _MIN_LOG_HZ = 200.0 / 3, 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = math.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel of frequencies in Hz (librosa's ``htk=False``)."""
    hz = np.asarray(hz, dtype=np.float64)
    return np.where(hz >= _MIN_LOG_HZ, _MIN_LOG_MEL + np.log(np.maximum(hz, 1e-10) / _MIN_LOG_HZ) / _LOG_STEP,
                    hz / _F_SP)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    """The inverse of :func:`hz_to_mel`."""
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= _MIN_LOG_MEL, _MIN_LOG_HZ * np.exp(_LOG_STEP * (mel - _MIN_LOG_MEL)), _F_SP * mel)


def mel_filters(
    sample_rate: int, n_fft: int, n_mels: int, *, f_min: float = 0.0, f_max: float | None = None
) -> torch.Tensor:
    """float32 ``[n_mels, n_fft // 2 + 1]``: triangles on the mel scale, each of unit area (Slaney norm)."""
    f_max = sample_rate / 2 if f_max is None else f_max
    if not 0 <= f_min < f_max <= sample_rate / 2 or n_mels < 1 or n_fft < 2:
        raise ValueError(f"need 0 <= f_min < f_max <= sample_rate/2, n_mels >= 1, n_fft >= 2, got "
                         f"{f_min=} {f_max=} {sample_rate=} {n_mels=} {n_fft=}")
    bins = np.fft.rfftfreq(n_fft, 1.0 / sample_rate)
    edges = mel_to_hz(np.linspace(hz_to_mel(np.array(f_min)), hz_to_mel(np.array(f_max)), n_mels + 2))
    widths = np.diff(edges)
    slopes = edges[:, None] - bins[None, :]
    lower = -slopes[:-2] / widths[:-1, None]
    upper = slopes[2:] / widths[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper)) * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return torch.from_numpy(weights.astype(np.float32))


def mel_frames(samples: int, hop_length: int) -> int:
    """Frames of a centred STFT over ``samples`` samples: ``1 + samples // hop_length``."""
    if samples < 0 or hop_length < 1:
        raise ValueError(f"need samples >= 0 and hop_length >= 1, got {samples=} {hop_length=}")
    return 1 + samples // hop_length


def audio_token_count(samples: int, *, hop_length: int = 160, downsample: int = 4) -> int:
    """Backbone tokens of a clip of ``samples`` samples: its feature frames over ``downsample``, rounded up."""
    if downsample < 1:
        raise ValueError(f"downsample must be >= 1, got {downsample}")
    return -(-mel_frames(samples, hop_length) // downsample)


@dataclass(frozen=True)
class LogMel:
    """Log-mel features ``[frames, n_mels]`` float32 of a waveform ``[samples]`` or ``[samples, channels]``.

    Defaults are Whisper's at 16 kHz: 25 ms windows every 10 ms, 80 mels
    (``n_mels=128`` for Whisper large-v3).
    """

    sample_rate: int = 16000
    n_fft: int = 400
    hop_length: int = 160
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float | None = None
    floor: float = 1e-10
    whisper_scale: bool = False

    def __post_init__(self) -> None:
        if self.hop_length < 1 or not self.floor > 0 or self.n_fft % 2:
            raise ValueError(f"LogMel needs hop_length >= 1, floor > 0 and an even n_fft, got {self.hop_length=} "
                             f"{self.floor=} {self.n_fft=}")
        _ = self.filters  # checks the rest now, not at the first clip

    @cached_property
    def filters(self) -> torch.Tensor:
        """The mel filterbank ``[n_mels, n_fft // 2 + 1]`` (made once)."""
        return mel_filters(self.sample_rate, self.n_fft, self.n_mels, f_min=self.f_min, f_max=self.f_max)

    @cached_property
    def window(self) -> torch.Tensor:
        return torch.hann_window(self.n_fft, periodic=True, dtype=torch.float32)

    def frames(self, samples: int) -> int:
        return mel_frames(samples, self.hop_length)

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        x = waveform.to(torch.float32)
        if x.dim() == 2:
            x = x.mean(dim=1)
        if x.dim() != 1:
            raise ValueError(f"LogMel takes a waveform [samples] or [samples, channels], got {list(waveform.shape)}")
        if x.numel() == 0:
            raise ValueError("LogMel of an empty waveform")
        pad = self.n_fft // 2
        mode = "reflect" if x.numel() > pad else "constant"  # reflect needs more samples than the padding
        padded = torch.nn.functional.pad(x[None, None], (pad, pad), mode=mode)[0, 0]
        frames = padded.unfold(0, self.n_fft, self.hop_length)  # [frames, n_fft]
        power = torch.fft.rfft(frames * self.window, dim=1).abs().square()  # [frames, n_fft // 2 + 1]
        mel = power @ self.filters.T
        out = torch.log10(torch.clamp(mel, min=self.floor))
        if self.whisper_scale:
            out = (torch.maximum(out, out.max() - 8.0) + 4.0) / 4.0
        return out.contiguous()
