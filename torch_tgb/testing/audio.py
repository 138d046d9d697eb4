"""Audio made locally for tests, examples and benchmarks: sine sweeps encoded with PyAV, and bad files.

Nothing is downloaded. Every clip is a pure function of its arguments:
a sine sweep (a chirp from ``f0`` to ``f1`` Hz, a little seeded noise, a
phase offset per channel) encoded as WAV (16-bit PCM), FLAC, MP3 (LAME,
with its Info frame) or Opus (in Ogg); :func:`reference_decode` is what
PyAV itself makes of a file (decode + ``AudioResampler``), the baseline the
tests and ``benchmarks/audio.py`` compare ``DecodeAudio`` with.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

__all__ = ["AUDIO_FORMATS", "bad_audio", "encode_audio", "reference_decode", "sweep", "write_audio_files"]

#: format name -> (container, codec, sample format the encoder takes)
AUDIO_FORMATS = {
    "wav": ("wav", "pcm_s16le", "s16"),
    "flac": ("flac", "flac", "s16"),
    "mp3": ("mp3", "libmp3lame", "fltp"),
    "opus": ("ogg", "libopus", "flt"),
}
#: rates libopus accepts; an Opus clip at another rate is written at 48 kHz
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def sweep(seconds: float, sample_rate: int, *, channels: int = 1, f0: float = 110.0, f1: float = 3000.0,
          amplitude: float = 0.5, seed: int = 0) -> np.ndarray:
    """float32 ``[samples, channels]``: a linear chirp ``f0 -> f1`` plus noise at -50 dB, in ``[-1, 1]``."""
    n = int(round(seconds * sample_rate))
    t = np.arange(n, dtype=np.float64) / sample_rate
    rate = (f1 - f0) / max(seconds, 1e-9)
    rng = np.random.default_rng(seed)
    cols = [amplitude * np.sin(2 * np.pi * (f0 * t + 0.5 * rate * t * t) + c * math.pi / 3) for c in range(channels)]
    out = np.stack(cols, axis=1) + rng.normal(0, amplitude * 0.003, (n, channels))
    return np.clip(out, -1, 1).astype(np.float32)


def encode_audio(samples: np.ndarray, sample_rate: int, fmt: str = "flac") -> bytes:
    """float ``[samples, channels]`` (1 or 2 channels) encoded with PyAV as ``fmt`` (:data:`AUDIO_FORMATS`)."""
    import av

    container, codec, sample_fmt = AUDIO_FORMATS[fmt]
    channels = int(samples.shape[1])
    layout = {1: "mono", 2: "stereo"}[channels]
    if fmt == "opus" and sample_rate not in _OPUS_RATES:
        samples = _resample(samples, sample_rate, 48000)
        sample_rate = 48000
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=sample_rate, layout=layout)
        stream.codec_context.open()
        step = stream.codec_context.frame_size or 1024
        for start in range(0, samples.shape[0], step):
            frame = av.AudioFrame.from_ndarray(_as_frame(samples[start : start + step], sample_fmt), format=sample_fmt,
                                               layout=layout)
            frame.sample_rate, frame.pts = sample_rate, start
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def _as_frame(chunk: np.ndarray, sample_fmt: str) -> np.ndarray:
    if sample_fmt == "s16":  # packed: [1, samples·channels]
        return (np.clip(chunk, -1, 1) * 32767).round().astype(np.int16).reshape(1, -1)
    if sample_fmt == "fltp":  # planar: [channels, samples]
        return np.ascontiguousarray(chunk.T, dtype=np.float32)
    return np.ascontiguousarray(chunk, dtype=np.float32).reshape(1, -1)


def _resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Linear interpolation, good enough to hand a test clip to an encoder that wants another rate."""
    n = int(round(samples.shape[0] * target / rate))
    x = np.arange(n) * rate / target
    return np.stack([np.interp(x, np.arange(samples.shape[0]), samples[:, c]) for c in range(samples.shape[1])],
                    axis=1).astype(np.float32)


def reference_decode(data: bytes, *, sample_rate: int = 16000, layout: str = "mono") -> np.ndarray:
    """float32 ``[samples, channels]``: PyAV's own decode of the first audio stream + ``AudioResampler``."""
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout=layout, rate=sample_rate)
        chunks = [o.to_ndarray() for frame in container.decode(stream) for o in resampler.resample(frame)]
        chunks += [o.to_ndarray() for o in resampler.resample(None)]
    channels = {"mono": 1, "stereo": 2}[layout]
    return np.concatenate(chunks, axis=1).reshape(-1, channels)


def bad_audio() -> dict[str, tuple[str, bytes]]:
    """Hostile audio files by the reason ``DecodeAudio`` skips them for: ``reason -> (extension, bytes)``.

    ``corrupt`` (random bytes), ``truncated`` (a FLAC cut in half),
    ``truncated_wav`` (a WAV cut: its data chunk says more), ``zero_length`` (0
    bytes), ``silent_container`` (a WAV of 0 samples: zero_length too) and
    ``too_long`` (a 3 s clip; decode it with ``max_seconds`` between 2 and 3: the others are 2 s).
    """
    clip = sweep(2.0, 16000, seed=7)
    flac = encode_audio(clip, 16000, "flac")
    wav = encode_audio(clip, 16000, "wav")
    return {
        "corrupt": ("mp3", np.random.default_rng(3).bytes(4000)),
        "truncated": ("flac", flac[: len(flac) // 2]),
        "truncated_wav": ("wav", wav[: len(wav) // 2]),
        "zero_length": ("wav", b""),
        "silent_container": ("wav", encode_audio(np.zeros((0, 1), np.float32), 16000, "wav")),
        "too_long": ("flac", encode_audio(sweep(3.0, 16000, seed=8), 16000, "flac")),
    }


def write_audio_files(root: Path, n: int, *, seed: int = 0, formats: tuple[str, ...] = ("wav", "flac", "mp3"),
                      min_seconds: float = 0.3, max_seconds: float = 2.0,
                      rates: tuple[int, ...] = (16000, 22050, 44100),
                      words: int = 12) -> list[str]:
    """``n`` clips ``clip-00000.<fmt>`` of random lengths, rates and formats, each with a transcript ``.txt``.

    The transcript is a few words (``"w3 w17 ..."``, for ``testing.media.word_tokenizer``).
    """
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(n):
        fmt = formats[k % len(formats)]
        rate = int(rates[int(rng.integers(0, len(rates)))])
        seconds = float(rng.uniform(min_seconds, max_seconds))
        clip = sweep(seconds, rate, f0=float(rng.uniform(80, 400)), f1=float(rng.uniform(800, rate / 2.5)),
                     seed=seed * 100_003 + k)
        path = root / f"clip-{k:05d}.{fmt}"
        path.write_bytes(encode_audio(clip, rate, fmt))
        text = " ".join(f"w{int(w)}" for w in rng.integers(0, 50, int(rng.integers(1, words + 1))))
        path.with_suffix(".txt").write_text(text)
        paths.append(str(path))
    return paths
