"""transforms.audio / audio_features: decode + resample equals PyAV's own, bad files are named, log-mel is right."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import MediaError
from torch_tgb.testing.audio import AUDIO_FORMATS, bad_audio, encode_audio, reference_decode, sweep
from torch_tgb.transforms.audio import decode_audio, wav_shortfall
from torch_tgb.transforms.audio_features import LogMel, audio_token_count, mel_filters, mel_frames

av = pytest.importorskip("av")


@pytest.mark.parametrize("fmt", sorted(AUDIO_FORMATS))
@pytest.mark.parametrize("rate", [16000, 22050, 44100])
@pytest.mark.parametrize("channels,layout", [(1, "mono"), (2, "mono"), (2, "stereo"), (1, "stereo")])
def test_round_trip_at_16k_matches_pyav_reference(fmt, rate, channels, layout):
    clip = sweep(0.7, rate, channels=channels, seed=rate + channels)
    data = encode_audio(clip, rate, fmt)
    ours = decode_audio(data, sample_rate=16000, layout=layout)
    ref = reference_decode(data, sample_rate=16000, layout=layout)
    assert ours.dtype == torch.float32 and ours.shape == ref.shape and ours.shape[1] == {"mono": 1, "stereo": 2}[layout]
    assert np.abs(ours.numpy() - ref).max() <= 1e-4
    assert abs(ours.shape[0] - 0.7 * 16000) <= 0.03 * 16000  # the clip's length, give or take codec padding


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_round_trip_at_16k_is_the_signal(fmt):
    clip = sweep(1.0, 16000, seed=3)
    got = decode_audio(encode_audio(clip, 16000, fmt)).numpy()
    assert got.shape == clip.shape
    assert np.abs(got - clip).max() <= 1e-4  # 16-bit quantisation: at most 1/65534 off


def test_rate_and_layout_none_keep_the_stream():
    clip = sweep(0.5, 22050, channels=2)
    got = decode_audio(encode_audio(clip, 22050, "flac"), sample_rate=None, layout=None)
    assert got.shape == clip.shape and np.abs(got.numpy() - clip).max() <= 1e-4


@pytest.mark.parametrize("name,reason", [
    ("corrupt", "corrupt"), ("truncated", "truncated"), ("truncated_wav", "truncated"),
    ("zero_length", "zero_length"), ("silent_container", "zero_length"),
])
def test_bad_files_are_media_errors_with_their_reason(name, reason):
    _, data = bad_audio()[name]
    with pytest.raises(MediaError) as e:
        decode_audio(data)
    assert e.value.reason == reason, str(e.value)


def test_too_long_is_refused_from_the_header_and_while_decoding():
    _, data = bad_audio()["too_long"]  # 3 s
    with pytest.raises(MediaError, match="2.00 s|3.00 s") as e:
        decode_audio(data, max_seconds=2.0)
    assert e.value.reason == "too_long"
    assert decode_audio(data, max_seconds=3.5).shape[0] == 48000
    no_length = _mp3_without_vbr_header(sweep(3.0, 16000))  # a length estimated from the bitrate only
    with pytest.raises(MediaError, match="decoded") as e:  # found while decoding
        decode_audio(no_length, max_seconds=1.0)
    assert e.value.reason == "too_long"


@pytest.mark.parametrize("fmt", ["mp3", "opus", "flac"])
def test_cut_files_of_every_format_are_truncated(fmt):
    data = encode_audio(sweep(2.0, 16000), 16000, fmt)
    with pytest.raises(MediaError) as e:
        decode_audio(data[: len(data) // 2])
    assert e.value.reason == "truncated", str(e.value)


def test_a_vbr_mp3_without_a_length_header_is_neither_truncated_nor_too_long():
    # No Xing/Info frame and a quiet start: ffmpeg guesses ~12 s from the first frames' bitrate for 4 s of audio.
    # That guess is held against nothing: not the decoded length (truncated), not max_seconds (too_long).
    quiet_then_loud = np.concatenate([np.zeros((32000, 1), np.float32),
                                      np.random.default_rng(0).normal(0, 0.3, (32000, 1)).astype(np.float32)])
    data = _mp3_without_vbr_header(quiet_then_loud, vbr=True)
    with av.open(io.BytesIO(data)) as container:
        assert float(container.streams.audio[0].duration * container.streams.audio[0].time_base) > 8
    got = decode_audio(data, max_seconds=5.0)
    assert 64000 <= got.shape[0] <= 64000 + 2 * 1152  # the encoder's delay and padding are not trimmed


def test_damage_before_the_end_is_corrupt_and_a_stream_less_file_is_format():
    data = bytearray(encode_audio(sweep(2.0, 16000), 16000, "flac"))
    rng = np.random.default_rng(0)
    for i in rng.integers(200, len(data) - 2000, 400):
        data[i] = int(rng.integers(0, 256))
    with pytest.raises(MediaError) as e:
        decode_audio(bytes(data))
    assert e.value.reason == "corrupt"
    from torch_tgb.testing.media import encode_video

    with pytest.raises(MediaError) as e:
        decode_audio(encode_video(np.zeros((3, 16, 16, 3), np.uint8)))
    assert e.value.reason == "format"


def test_wav_shortfall_reads_the_data_chunk():
    wav = encode_audio(sweep(0.1, 8000), 8000, "wav")
    assert wav_shortfall(wav) == 0 and wav_shortfall(b"not a wav") == 0
    assert wav_shortfall(wav[:-10]) == 10


def test_decode_refuses_bad_settings():
    for kwargs in ({"sample_rate": 0}, {"layout": "5.1"}, {"max_seconds": 0}):
        with pytest.raises(ValueError):
            decode_audio(b"x", **kwargs)


def _mp3_without_vbr_header(clip: np.ndarray, *, vbr: bool = False) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp3", options={"write_xing": "0"}) as out:
        stream = out.add_stream("libmp3lame", rate=16000, layout="mono")
        if vbr:
            stream.codec_context.qscale = 4
        stream.codec_context.open()
        step = stream.codec_context.frame_size
        for start in range(0, clip.shape[0], step):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(clip[start : start + step].T), format="fltp",
                                               layout="mono")
            frame.sample_rate, frame.pts = 16000, start
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    data = buf.getvalue()
    assert b"Xing" not in data[:400] and b"Info" not in data[:400]
    return data


# --- log-mel against a straightforward reference --------------------------------------------------


def _slaney_mel(f: float) -> float:
    return f / (200 / 3) if f < 1000 else 15 + math.log(f / 1000) / (math.log(6.4) / 27)


def _slaney_hz(m: float) -> float:
    return m * (200 / 3) if m < 15 else 1000 * math.exp((m - 15) * math.log(6.4) / 27)


def _reference_filters(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """Triangles written out bin by bin: rising from the lower to the centre frequency, falling to the upper."""
    top = _slaney_mel(sr / 2)
    points = [_slaney_hz(top * i / (n_mels + 1)) for i in range(n_mels + 2)]
    out = np.zeros((n_mels, n_fft // 2 + 1))
    for m in range(n_mels):
        lo, c, hi = points[m], points[m + 1], points[m + 2]
        for k in range(n_fft // 2 + 1):
            f = k * sr / n_fft
            if lo <= f <= c:
                out[m, k] = (f - lo) / (c - lo)
            elif c < f <= hi:
                out[m, k] = (hi - f) / (hi - c)
        out[m] *= 2 / (hi - lo)
    return out


def _reference_log_mel(x: np.ndarray, sr: int, n_fft: int, hop: int, n_mels: int) -> np.ndarray:
    """The definition: reflect-pad, Hann window, DFT by its sum, power, mel, log10 with a floor."""
    pad = n_fft // 2
    xp = np.pad(x.astype(np.float64), pad, mode="reflect")
    n = np.arange(n_fft)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft)
    dft = np.exp(-2j * np.pi * np.outer(np.arange(n_fft // 2 + 1), n) / n_fft)
    frames = [xp[i * hop : i * hop + n_fft] * window for i in range(1 + len(x) // hop)]
    power = np.abs(np.array(frames) @ dft.T) ** 2
    return np.log10(np.maximum(power @ _reference_filters(sr, n_fft, n_mels).T, 1e-10))


def test_mel_filters_match_the_written_out_triangles():
    for sr, n_fft, n_mels in ((16000, 400, 80), (16000, 400, 128), (8000, 256, 40)):
        assert np.abs(mel_filters(sr, n_fft, n_mels).numpy() - _reference_filters(sr, n_fft, n_mels)).max() <= 1e-6


@pytest.mark.parametrize("n", [1200, 1601, 16000])
def test_log_mel_matches_the_reference(n):
    x = sweep(n / 16000, 16000, seed=n)[:, 0]
    ours = LogMel()(torch.from_numpy(x)).numpy()
    ref = _reference_log_mel(x, 16000, 400, 160, 80)
    assert ours.shape == ref.shape == (mel_frames(n, 160), 80)
    # float32 FFT against the float64 sum: within 50 dB of the peak to 1e-3 in log10 (0.01 dB), and everywhere
    # to 1e-5 of the peak in power (where float32's own rounding, not the method, sets the error)
    loud = ref > ref.max() - 5
    assert loud.sum() >= 100 and np.abs(ours - ref)[loud].max() <= 1e-3
    assert np.abs(10.0**ours - 10.0**ref).max() <= 1e-5 * 10.0 ** ref.max()


def test_log_mel_mixes_channels_and_scales_like_whisper():
    clip = torch.from_numpy(sweep(0.5, 16000, channels=2))
    assert torch.allclose(LogMel()(clip), LogMel()(clip.mean(dim=1)))
    scaled = LogMel(whisper_scale=True)(clip)
    raw = LogMel()(clip)
    assert torch.allclose(scaled, (torch.maximum(raw, raw.max() - 8) + 4) / 4)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5000), st.sampled_from([80, 160, 320]))
def test_frames_and_tokens_follow_the_feature_length(samples, hop):
    mel = LogMel(hop_length=hop, n_fft=2 * hop)
    assert mel(torch.zeros(samples)).shape[0] == mel.frames(samples) == mel_frames(samples, hop)
    assert audio_token_count(samples, hop_length=hop, downsample=4) == math.ceil(mel_frames(samples, hop) / 4)


def test_log_mel_refuses_bad_settings():
    with pytest.raises(ValueError):
        LogMel(n_fft=401)
    with pytest.raises(ValueError):
        LogMel(f_max=9000)
    with pytest.raises(ValueError):
        LogMel()(torch.zeros(0))
