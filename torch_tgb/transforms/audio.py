"""Decoding audio from bytes: PyAV decode, resample to a target rate and channel layout, bad input named.

A pure function of its arguments (bytes in, a float32 ``[samples, channels]``
tensor out), called by ``datapipes.DecodeAudio``. FLAC, WAV, MP3, Opus/Vorbis
(Ogg) and whatever else the ffmpeg bundled with PyAV reads (``audio`` or
``video`` extra: ``av``). The output is exactly what PyAV's own
``AudioResampler(format="flt", layout=..., rate=...)`` makes of the decoded
frames (its tail flushed), so a clip equals a reference decode with PyAV.

Every failure is a :class:`~torch_tgb.errors.MediaError` whose ``reason``
names the kind of bad input, so a stage can skip it and count it:

- ``"zero_length"``: no bytes, or a stream that decodes to no sample;
- ``"corrupt"``: not a container ffmpeg reads, or packets that do not decode
  (a damaged frame before the end of the data);
- ``"truncated"``: the data ends before the stream does: a WAV whose data
  chunk declares more bytes than follow it, an end of file inside the
  container, a packet at the very end that does not decode, or fewer samples
  than a header that states the exact length declares (WAV, FLAC, Ogg,
  MP4/M4A, an MP3 with a Xing/Info/VBRI frame; an MP3 without one only has
  an estimate from its bitrate, which is never held against it);
- ``"too_long"``: longer than ``max_seconds``, refused from the header
  before decoding where the header states the exact length, else as soon as
  the decoded samples pass it (a bitrate estimate refuses nothing); memory
  stays within ``max_seconds × rate × channels × 4`` bytes;
- ``"format"``: a container without an audio stream.
"""

from __future__ import annotations

import io
import struct
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from torch_tgb.errors import MediaError
from torch_tgb.transforms.media import _av

if TYPE_CHECKING:
    from av.audio.stream import AudioStream
    from av.container import InputContainer

__all__ = ["AUDIO_EXTS", "CHANNEL_LAYOUTS", "decode_audio", "declared_seconds", "wav_shortfall"]

#: file extensions (WebDataset member suffixes) of audio
AUDIO_EXTS = ("flac", "wav", "mp3", "opus", "ogg", "m4a")
#: the channel layouts a clip can be mixed to, and their channel counts
CHANNEL_LAYOUTS = {"mono": 1, "stereo": 2}
#: a header's stated length is held against the decoded one only beyond this slack: codec delay and padding
_SLACK_SECONDS, _SLACK_FRACTION = 0.05, 0.01


def decode_audio(
    data: bytes,
    *,
    sample_rate: int | None = 16000,
    layout: str | None = "mono",
    max_seconds: float | None = 600.0,
) -> torch.Tensor:
    """float32 ``[samples, channels]`` in ``[-1, 1]`` of the first audio stream of ``data``.

    Resampled to ``sample_rate`` and mixed to ``layout`` (``"mono"`` or
    ``"stereo"``) with PyAV's ``AudioResampler``; ``None`` keeps the
    stream's rate or layout. See the module docstring for the errors.
    """
    if sample_rate is not None and sample_rate < 1:
        raise ValueError(f"sample_rate must be >= 1 or None, got {sample_rate}")
    if layout is not None and layout not in CHANNEL_LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(CHANNEL_LAYOUTS)} or None, got {layout!r}")
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be > 0 or None, got {max_seconds}")
    if not data:
        raise MediaError("empty audio (0 bytes)", "zero_length")
    shortfall = wav_shortfall(data)
    if shortfall:
        raise MediaError(f"truncated WAV: its data chunk lacks {shortfall} bytes", "truncated")
    av = _av("audio")
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except EOFError as e:  # the container's own structure runs past the end of the bytes
        raise MediaError(f"truncated audio: the data ends inside the container ({e})", "truncated") from e
    except (av.FFmpegError, OSError, ValueError) as e:
        raise MediaError(f"not a readable audio file: {e}", "corrupt") from e
    with container:
        if not container.streams.audio:
            raise MediaError("no audio stream", "format")
        stream = container.streams.audio[0]
        rate = int(stream.codec_context.sample_rate or 0)
        if rate < 1:
            raise MediaError(f"audio stream with sample rate {rate}", "corrupt")
        declared = declared_seconds(container, stream, data)
        if max_seconds is not None and declared is not None and declared > max_seconds:
            raise MediaError(f"audio too long: {declared:.2f} s > max_seconds={max_seconds}", "too_long")
        target_layout = layout or _layout_name(stream)
        resampler = av.AudioResampler(format="flt", layout=target_layout, rate=sample_rate or rate)
        chunks, decoded = _decode(av, container, stream, resampler, rate, max_seconds)
    if decoded == 0:
        raise MediaError("audio stream without a sample", "zero_length")
    if declared is not None and decoded / rate < declared * (1 - _SLACK_FRACTION) - _SLACK_SECONDS:
        raise MediaError(f"truncated audio: {decoded / rate:.3f} s decoded, the header says {declared:.3f} s",
                         "truncated")
    channels = CHANNEL_LAYOUTS.get(target_layout) or int(stream.codec_context.channels)
    flat = np.concatenate(chunks, axis=1) if len(chunks) > 1 else chunks[0] if chunks else np.zeros((1, 0), np.float32)
    return torch.from_numpy(np.ascontiguousarray(flat.reshape(-1, channels), dtype=np.float32))


def _decode(
    av: ModuleType, container: InputContainer, stream: AudioStream, resampler: Any, rate: int,
    max_seconds: float | None,
) -> tuple[list[np.ndarray], int]:
    """The resampled chunks (packed ``[1, samples·channels]``) and the samples decoded at the stream's rate."""
    chunks: list[np.ndarray] = []
    decoded = 0
    limit = None if max_seconds is None else max_seconds * rate
    try:
        for frame in container.decode(stream):
            decoded += frame.samples
            if limit is not None and decoded > limit:
                raise MediaError(f"audio too long: more than max_seconds={max_seconds} s decoded", "too_long")
            chunks.extend(out.to_ndarray() for out in resampler.resample(frame))
        chunks.extend(out.to_ndarray() for out in resampler.resample(None))
    except MediaError:
        raise
    except EOFError as e:
        raise MediaError(f"truncated audio: {e}", "truncated") from e
    except (av.FFmpegError, ValueError) as e:
        # a packet that does not decode at the very end is where the data was cut; one with packets after it is damage
        last = next((p for p in container.demux(stream) if p.size), None) is None
        raise MediaError(f"{'truncated' if last else 'corrupt'} audio: {e}", "truncated" if last else "corrupt") from e
    return chunks, decoded


def _layout_name(stream: AudioStream) -> str:
    """The stream's layout for the resampler: a named one, else the default of its channel count."""
    channels = int(stream.codec_context.channels or 0)
    name = str(stream.codec_context.layout.name)
    if channels < 1:
        raise MediaError(f"audio stream with {channels} channels", "corrupt")
    return name if "channels" not in name else {1: "mono", 2: "stereo"}.get(channels, name)


def declared_seconds(container: InputContainer, stream: AudioStream, data: bytes) -> float | None:
    """The length a header states exactly (WAV, FLAC, Ogg, MP4/M4A, MP3 with a Xing/Info/VBRI frame); else None."""
    fmt = str(container.format.name)
    names = fmt.split(",")
    exact = any(n in names for n in ("wav", "flac", "ogg", "mov")) or (fmt == "mp3" and _has_vbr_header(data))
    if not exact or stream.duration is None or stream.time_base is None:
        return None
    return float(stream.duration * stream.time_base)


def _has_vbr_header(data: bytes) -> bool:
    """An MP3 whose first frame is a Xing/Info (LAME) or VBRI frame: its frame count is the exact length."""
    start = 0
    if data[:3] == b"ID3" and len(data) >= 10:  # an ID3v2 tag first: its size is 4 syncsafe bytes
        size = (data[6] & 0x7F) << 21 | (data[7] & 0x7F) << 14 | (data[8] & 0x7F) << 7 | (data[9] & 0x7F)
        start = 10 + size
    head = data[start : start + 200]
    return b"Xing" in head or b"Info" in head or b"VBRI" in head


def wav_shortfall(data: bytes) -> int:
    """Bytes a RIFF/WAVE file's ``data`` chunk declares beyond the end of ``data`` (0: complete, or not a WAV).

    ffmpeg clamps such a chunk to the bytes present and decodes the rest
    silently, so a cut WAV would pass as a shorter clip without this check.
    """
    if len(data) < 12 or data[:4] not in (b"RIFF", b"RF64") or data[8:12] != b"WAVE":
        return 0
    at = 12
    while at + 8 <= len(data):
        chunk, size = data[at : at + 4], int(struct.unpack_from("<I", data, at + 4)[0])
        if chunk == b"data":
            if data[:4] == b"RF64" or size == 0xFFFFFFFF:  # the real size lives in the ds64 chunk: not checked
                return 0
            return max(0, at + 8 + size - len(data))
        at += 8 + size + (size & 1)
    return 0

