"""Decoding images and videos from bytes, with their size bounded before any pixel is decoded.

Pure functions of their arguments (bytes in, uint8 tensors out); the stages
of ``datapipes.produce.images`` and the video sources call them. Every
failure is a :class:`~torch_tgb.errors.MediaError` whose ``reason`` names
the kind of bad input, so a stage can skip and count it:

- ``"empty"``: no bytes; ``"zero_size"``: a header with a zero width or height;
- ``"format"``: not one of the allowed formats (a GIF or TIFF under ``.jpg``, random bytes);
- ``"too_large"``: the header's ``width × height`` exceeds ``max_pixels`` (a
  decompression bomb: 30000×30000 is refused after reading a few hundred
  header bytes, never allocated), or a video's frames would exceed ``max_frames``;
- ``"corrupt"``: the header reads but the data does not decode (truncated,
  damaged).

Images: ``decode_image`` gives Pillow's ``Image.open(...).convert("RGB")``
as a ``[H, W, 3]`` uint8 tensor. JPEGs go through libjpeg-turbo via
``simplejpeg`` when it is installed (about 3× Pillow's decode on the same
files, identical pixels on the benchmark's photographs and in any case within
±2 per channel: both are libjpeg-turbo with its default IDCT and upsampling);
PNG and WebP through Pillow. Videos: ``decode_video`` samples frames from the
first video stream with PyAV (``video`` extra) at a given fps or count.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from torch_tgb.errors import MediaError, MissingExtra

if TYPE_CHECKING:
    from av import VideoFrame
    from av.container import InputContainer
    from av.video.stream import VideoStream

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "IMAGE_EXTS",
    "IMAGE_FORMATS",
    "OTHER_MEDIA_EXTS",
    "VIDEO_EXTS",
    "decode_image",
    "decode_video",
    "frame_times",
    "frames_at",
    "image_header",
    "media_keys",
]

#: formats decoded by default (Pillow names); anything else is a ``"format"`` error
IMAGE_FORMATS = ("JPEG", "PNG", "WEBP")
#: file extensions (WebDataset member suffixes) of images and videos
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")
VIDEO_EXTS = ("mp4", "webm", "mkv", "mov")
#: media extensions that are recognised but not decoded: a sample with one of these is a bad input
OTHER_MEDIA_EXTS = ("gif", "bmp", "tif", "tiff", "avif", "heic", "heif", "jxl", "ico", "svg", "ppm", "pgm",
                    "avi", "flv", "mpg", "mpeg", "wmv", "3gp")
#: the largest image (width × height) decoded by default: 8192 × 8192, 192 MiB as RGB
DEFAULT_MAX_PIXELS = 8192 * 8192

_JPEG_MAGIC = b"\xff\xd8\xff"


def media_keys(keys: Iterable[Any], exts: Sequence[str]) -> list[str]:
    """The member keys whose last dot component is one of ``exts`` (``"jpg"``, ``"0.jpg"``), sorted."""
    return sorted(k for k in keys if isinstance(k, str) and not k.startswith("__") and k.rsplit(".", 1)[-1].lower() in exts)


def _pil() -> ModuleType:
    try:
        from PIL import Image
    except ImportError as e:
        raise MissingExtra("Pillow is not installed; pip install 'torch-tgb[images]'") from e
    return Image


def _simplejpeg() -> ModuleType | None:
    try:
        import simplejpeg
    except ImportError:
        return None
    module: ModuleType = simplejpeg  # untyped: seen as Any
    return module


def image_header(data: bytes, *, formats: Sequence[str] = IMAGE_FORMATS) -> tuple[str, int, int]:
    """``(format, height, width)`` from the header alone; raises :class:`MediaError`."""
    if not data:
        raise MediaError("empty image (0 bytes)", "empty")
    Image = _pil()
    try:
        with warnings.catch_warnings():  # Pillow warns above 89 MP; the caller's max_pixels decides
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=list(formats)) as im:
                fmt, (width, height) = str(im.format), im.size
    except Image.DecompressionBombError as e:  # Pillow's own bound, met before ours when it is lower
        raise MediaError(f"image too large: {e}", "too_large") from e
    except Image.UnidentifiedImageError as e:
        raise MediaError(f"not an image of the allowed formats {list(formats)}", "format") from e
    except Exception as e:  # OSError, SyntaxError, struct.error...: a parser's view of hostile bytes
        raise MediaError(f"unreadable image header: {e!r}", "corrupt") from e
    if width < 1 or height < 1:
        raise MediaError(f"zero-size image ({width}x{height})", "zero_size")
    return fmt, height, width


def decode_image(
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    formats: Sequence[str] = IMAGE_FORMATS,
    decoder: str = "auto",
) -> torch.Tensor:
    """RGB uint8 ``[H, W, 3]`` of an encoded image, after checking its header's size.

    ``decoder``: ``"auto"`` (simplejpeg for JPEG when installed, else Pillow)
    or ``"pillow"``. Alpha is dropped and grey or palette images become RGB,
    as Pillow's ``convert("RGB")`` does.
    """
    if decoder not in ("auto", "pillow"):
        raise ValueError(f"decoder must be 'auto' or 'pillow', got {decoder!r}")
    fmt, height, width = image_header(data, formats=formats)
    if height * width > max_pixels:
        raise MediaError(f"image too large: {width}x{height} > max_pixels={max_pixels}", "too_large")
    sj = _simplejpeg() if decoder == "auto" and fmt == "JPEG" and data[:3] == _JPEG_MAGIC else None
    if sj is not None:
        try:
            return torch.from_numpy(sj.decode_jpeg(data, colorspace="RGB"))
        except ValueError:
            pass  # CMYK, 12-bit, arithmetic coding...: Pillow decides (and names a truly broken file)
    Image = _pil()
    try:
        with Image.open(io.BytesIO(data), formats=[fmt]) as im:
            rgb = im.convert("RGB")
            array = np.asarray(rgb)
    except Image.DecompressionBombError as e:
        raise MediaError(f"image too large: {e}", "too_large") from e
    except Exception as e:  # truncated or damaged data (OSError, SyntaxError, ValueError, struct.error...)
        raise MediaError(f"corrupt {fmt} image: {e}", "corrupt") from e
    return torch.from_numpy(np.array(array, dtype=np.uint8, copy=True))


def frame_times(
    duration: float, *, fps: float | None = None, num_frames: int | None = None, max_frames: int = 256
) -> list[float]:
    """The times (seconds) at which frames are taken from a clip of ``duration`` seconds.

    ``fps``: ``0, 1/fps, 2/fps, ...`` while below ``duration``; ``num_frames``:
    the centres of ``num_frames`` equal segments. At most ``max_frames``
    either way (an ``fps`` clip is cut short, never re-spaced).
    """
    if (fps is None) == (num_frames is None):
        raise ValueError(f"give exactly one of fps and num_frames, got {fps=} {num_frames=}")
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    if not math.isfinite(duration) or duration <= 0:
        return [0.0]
    if fps is not None:
        if not math.isfinite(fps) or fps <= 0:
            raise ValueError(f"fps must be finite and > 0, got {fps}")
        count = min(max_frames, max(1, math.ceil(duration * fps - 1e-9)))
        return [k / fps for k in range(count)]
    if num_frames is None or num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    count = min(num_frames, max_frames)
    return [(k + 0.5) * duration / count for k in range(count)]


def _av(extra: str = "video") -> ModuleType:
    try:
        import av
    except ImportError as e:
        raise MissingExtra(f"av (PyAV) is not installed; pip install 'torch-tgb[{extra}]'") from e
    return av


def decode_video(
    data: bytes,
    *,
    fps: float | None = None,
    num_frames: int | None = None,
    max_pixels: int = 1920 * 1080,
    max_frames: int = 256,
) -> torch.Tensor:
    """RGB uint8 frames ``[T, H, W, 3]`` sampled from the first video stream of ``data``.

    The frame shown at each of :func:`frame_times` (the last one starting at
    or before it) is kept; the stream's size is checked against ``max_pixels``
    before the first frame is decoded, and only kept frames are converted, so
    memory stays within ``max_frames × max_pixels × 3`` bytes.
    """
    frames = list(frames_at(data, None, fps=fps, num_frames=num_frames, max_pixels=max_pixels,
                            max_frames=max_frames))
    return torch.from_numpy(np.stack(frames))


def frames_at(
    data: bytes,
    times: Sequence[float] | None,
    *,
    fps: float | None = None,
    num_frames: int | None = None,
    max_pixels: int = 1920 * 1080,
    max_frames: int = 256,
) -> Iterator[np.ndarray]:
    """The RGB frame ``[H, W, 3]`` on screen at each of ``times`` (ascending seconds), one by one.

    ``times=None``: :func:`frame_times` of the clip (``fps`` / ``num_frames`` /
    ``max_frames``). One sequential decode; a frame is converted only when it
    is yielded, so a long episode streams in constant memory.
    """
    if not data:
        raise MediaError("empty video (0 bytes)", "empty")
    av = _av()
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, OSError, ValueError) as e:  # truncated (no index), damaged, not a container
        raise MediaError(f"not a readable video: {e}", "corrupt") from e
    with container:
        if not container.streams.video:
            raise MediaError("no video stream", "format")
        stream = container.streams.video[0]
        width, height = int(stream.codec_context.width), int(stream.codec_context.height)
        if width < 1 or height < 1:
            raise MediaError(f"zero-size video ({width}x{height})", "zero_size")
        if width * height > max_pixels:
            raise MediaError(f"video too large: {width}x{height} > max_pixels={max_pixels}", "too_large")
        if times is None:
            times = frame_times(_duration(container, stream), fps=fps, num_frames=num_frames, max_frames=max_frames)
        done = 0
        last: VideoFrame | None = None
        try:
            for frame in container.decode(stream):
                t = float(frame.time) if frame.time is not None else 0.0
                while done < len(times) and last is not None and t > times[done] + 1e-6:
                    yield _rgb(last, height, width)  # the frame on screen at that time
                    done += 1
                if done == len(times):
                    return
                last = frame
        except (av.FFmpegError, OSError, ValueError) as e:
            raise MediaError(f"corrupt video: {e}", "corrupt") from e
        if last is None:
            raise MediaError("video has no decodable frame", "corrupt")
        for _ in range(done, len(times)):  # times past the last frame: it stays on screen
            yield _rgb(last, height, width)


def _duration(container: InputContainer, stream: VideoStream) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000  # av.time_base
    return float("nan")


def _rgb(frame: VideoFrame, height: int, width: int) -> np.ndarray:
    array = np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)
    if array.shape != (height, width, 3):  # a stream whose size changes mid-way: refuse, never resize silently
        raise MediaError(f"video frame of shape {array.shape} in a {width}x{height} stream", "corrupt")
    return array
