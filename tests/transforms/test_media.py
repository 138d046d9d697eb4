"""transforms.media: decoding equals Pillow's, every bad input is a MediaError with its reason, videos sample right."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import MediaError, SourceError
from torch_tgb.testing.media import bad_images, encode_image, encode_video, photos, synthetic_image, synthetic_images
from torch_tgb.transforms.media import decode_image, decode_video, frame_times, image_header

Image = pytest.importorskip("PIL.Image")


def _pillow(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("decoder", ["auto", "pillow"])
def test_decode_equals_pillow_rgb(fmt, decoder):
    images = photos()[:3] + list(synthetic_images(4, 11, max_side=200))
    for image in images:
        data = encode_image(image, fmt)
        ours = decode_image(data, decoder=decoder)
        assert ours.dtype.is_floating_point is False and ours.shape == (*image.shape[:2], 3)
        assert np.abs(ours.numpy().astype(int) - _pillow(data)).max() <= 2
    assert image_header(encode_image(images[0], fmt)) == (fmt, *images[0].shape[:2])


def test_grey_alpha_and_palette_images_become_rgb():
    rgba = np.dstack([synthetic_image(20, 30, 3), np.full((20, 30), 7, np.uint8)])
    for mode_image, fmt in ((rgba, "PNG"), (synthetic_image(20, 30, 4)[..., 0], "PNG"), (synthetic_image(8, 8, 1)[..., 0], "JPEG")):
        data = encode_image(mode_image, fmt)
        assert np.array_equal(decode_image(data).numpy(), _pillow(data))
    palette = io.BytesIO()
    Image.fromarray(synthetic_image(16, 16, 5)).convert("P").save(palette, format="PNG")
    assert np.array_equal(decode_image(palette.getvalue()).numpy(), _pillow(palette.getvalue()))


@pytest.mark.parametrize(
    "name,reason",
    [("truncated", "corrupt"), ("corrupt", "format"), ("empty", "empty"), ("bomb", "too_large"), ("gif", "format"),
     ("text", "format")],
)
def test_bad_images_are_media_errors_with_a_reason(name, reason):
    with pytest.raises(MediaError) as e:
        decode_image(bad_images()[name])
    assert e.value.reason == reason and isinstance(e.value, SourceError)


def test_size_is_bounded_by_the_header_before_decoding():
    # 12000 x 12000 passes Pillow's own bomb check (a warning only) and is refused by ours, from the header
    data = bytearray(encode_image(synthetic_image(32, 32, 1)))
    sof = next(i for i in range(2, len(data) - 9) if data[i] == 0xFF and data[i + 1] == 0xC0)
    data[sof + 5 : sof + 9] = (12000).to_bytes(2, "big") * 2
    with pytest.raises(MediaError, match="max_pixels") as e:
        decode_image(bytes(data))
    assert e.value.reason == "too_large"
    with pytest.raises(MediaError, match="max_pixels"):
        decode_image(encode_image(synthetic_image(100, 100, 2)), max_pixels=100 * 99)
    zero = bytearray(encode_image(synthetic_image(16, 16, 1), "PNG"))
    zero[16:20] = (0).to_bytes(4, "big")  # IHDR width 0 (the CRC no longer matches: Pillow reads the size first)
    with pytest.raises(MediaError):
        decode_image(bytes(zero))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), fmt=st.sampled_from(["JPEG", "PNG", "WEBP"]))
def test_mutated_bytes_give_an_image_or_a_media_error(data, fmt):
    good = bytearray(encode_image(synthetic_image(24, 40, 9), fmt))
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(good) - 1))
        good[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(good)))
    try:
        out = decode_image(bytes(good[:cut]), max_pixels=10**6)
    except MediaError:
        return
    assert out.dtype.itemsize == 1 and out.dim() == 3 and out.shape[2] == 3 and out.numel() <= 3 * 10**6


def test_frame_times():
    assert frame_times(2.0, fps=2) == [0.0, 0.5, 1.0, 1.5]
    assert frame_times(2.0, num_frames=4) == [0.25, 0.75, 1.25, 1.75]
    assert len(frame_times(3600.0, fps=30, max_frames=16)) == 16
    assert frame_times(float("nan"), fps=2) == [0.0]
    with pytest.raises(ValueError):
        frame_times(1.0, fps=2, num_frames=3)
    with pytest.raises(ValueError):
        frame_times(1.0, fps=0)


@pytest.fixture(scope="module")
def clip() -> tuple[np.ndarray, bytes]:
    pytest.importorskip("av")
    frames = np.stack([np.full((48, 64, 3), 10 * i, np.uint8) for i in range(20)])  # 2 s at 10 fps
    return frames, encode_video(frames, fps=10)


def test_video_frames_at_fps_and_count(clip):
    frames, data = clip
    at2 = decode_video(data, fps=2)
    assert at2.shape == (4, 48, 64, 3) and at2.dtype.itemsize == 1
    # frame k shows value 10k (up to codec error): 2 fps picks frames 0, 5, 10, 15
    assert np.allclose(at2[:, 10, 10, 0].numpy(), [0, 50, 100, 150], atol=4)
    four = decode_video(data, num_frames=4)
    assert np.allclose(four[:, 10, 10, 0].numpy(), [20, 70, 120, 170], atol=4)  # centres 0.25, 0.75, ... s
    assert decode_video(data, fps=100, max_frames=7).shape[0] == 7
    webm = encode_video(frames[:6], fps=10, container="webm", codec="libvpx")
    assert decode_video(webm, num_frames=3).shape == (3, 48, 64, 3)


@pytest.mark.parametrize("case,reason", [("truncated", "corrupt"), ("garbage", "corrupt"), ("empty", "empty"),
                                         ("too_large", "too_large")])
def test_bad_videos_are_media_errors(clip, case, reason):
    _, data = clip
    kwargs: dict = {"fps": 2}
    if case == "truncated":
        data = data[: len(data) // 3]
    elif case == "garbage":
        data = bytes(range(256)) * 8
    elif case == "empty":
        data = b""
    else:
        kwargs["max_pixels"] = 48 * 63
    with pytest.raises(MediaError) as e:
        decode_video(data, **kwargs)
    assert e.value.reason == reason
