"""Hostile coded tensors: each lie a typed CorruptObject, in bounded memory, never a wrong tensor.

Every object here is CRC-valid (a tampered or buggy writer computes its CRCs
over what it claims): a stored size that lies, a decoded size that lies, a
decompression bomb (a small declared size, a huge real output), a shape
beyond what zstd can decode from the stored bytes, codecs the reader does
not know or that the footer cannot name.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import torch

from torch_tgb.errors import CorruptObject
from torch_tgb.format import decode_slice, parse_footer
from torch_tgb.format._crc import crc32c_of
from torch_tgb.format._dtypes import dtype_of_tensor
from torch_tgb.format._footer import _encode_v3
from torch_tgb.format._spec import _SLICE_ROW, _TENSOR_ROW

zstd = pytest.importorskip("zstandard")


def hostile(stored: bytes, *, shape: tuple[int, ...], codecs: list[str] | None = None, number: int = 1,
            length: int | None = None, dtype: torch.dtype = torch.uint8, version: int = 4) -> tuple[bytes, int]:
    """One TGB of one slice holding tensor ``x`` whose row says codec ``number`` of ``codecs``, ``length``
    stored bytes (default: all of ``stored``), shape ``shape``; CRCs valid over what it claims."""
    dt = dtype_of_tensor(dtype)
    assert dt is not None
    length = len(stored) if length is None else length
    body = stored.ljust(length, b"\0")
    pad = -len(body) % 64
    footer_offset = len(body) + pad
    srows = np.zeros(1, dtype=_SLICE_ROW)
    srows[0] = (0, 0, 0, length, 0, 1)
    trows = np.zeros(1, dtype=_TENSOR_ROW)
    trows[0] = (0, dt.code, len(shape), number, 0, crc32c_of(body[:length]), 0, length)
    doc = {"names": ["x"], "layout": None, "schema": {"x": {"dtype": dt.name}}, "metadata": {},
           "codecs": ["zstd"] if codecs is None else codecs}
    meta = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    footer = _encode_v3(1, 1, srows, trows, list(shape), meta, footer_offset, "k", version)
    return body + bytes(pad) + footer, footer_offset


def read(data: bytes, footer_offset: int) -> dict[str, torch.Tensor]:
    footer = parse_footer(data[footer_offset:], key="k", size=len(data), footer_offset=footer_offset)
    return decode_slice(bytearray(data), footer.slice(0), key="k")


def frame(payload: bytes, **options: object) -> bytes:
    """A zstd frame of ``payload`` as a torch_tgb writer makes it (content size and checksum), unless told."""
    settings = {"write_content_size": True, "write_checksum": True, **options}
    return bytes(zstd.ZstdCompressor(level=3, **settings).compress(payload))


PAYLOAD = bytes(range(256)) * 16  # 4096 bytes


def test_an_honest_object_of_the_same_making_reads() -> None:
    """The helper makes readable objects: each test below changes one thing."""
    got = read(*hostile(frame(PAYLOAD), shape=(len(PAYLOAD),)))
    assert got["x"].numpy().tobytes() == PAYLOAD


@pytest.mark.parametrize(("cut", "match"), [(-3, "does not decode"), (+8, "unused data")])
def test_a_stored_size_that_lies_is_refused(cut, match) -> None:
    stored = frame(PAYLOAD)
    with pytest.raises(CorruptObject, match=f"tensor 'x'.*{match}"):
        read(*hostile(stored, shape=(len(PAYLOAD),), length=len(stored) + cut))


@pytest.mark.parametrize(
    ("stored", "shape", "match"),
    [
        (frame(PAYLOAD), (2 * len(PAYLOAD),), "declares 4096 bytes; its shape \\[8192\\] of uint8 is 8192"),
        (frame(PAYLOAD), (len(PAYLOAD) // 2,), "declares 4096 bytes; its shape \\[2048\\]"),
        (frame(PAYLOAD, write_content_size=False), (len(PAYLOAD),), "declares no size"),
        (b"\x00" * 40, (len(PAYLOAD),), "frame header is unreadable"),
    ],
)
def test_a_decoded_size_that_lies_is_refused_before_decoding(stored, shape, match) -> None:
    with pytest.raises(CorruptObject, match=match):
        read(*hostile(stored, shape=shape))


RANDOM = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()


def _flip_literal(stored: bytes, payload: bytes) -> bytes:
    """``stored`` with one byte flipped inside a literal run of ``payload`` it copies verbatim (still decodable)."""
    at = stored.find(payload[1000:1016])
    assert at > 0
    return stored[: at + 8] + bytes([stored[at + 8] ^ 0x40]) + stored[at + 9 :]


def test_a_corrupt_frame_that_still_decodes_to_its_size_is_refused_by_its_checksum() -> None:
    """A flipped literal (CRCs recomputed over it: a reader with ``verify="never"`` trusts them) decodes to the
    right size with one wrong byte: the frame's checksum refuses it, never a wrong tensor."""
    stored = frame(RANDOM + RANDOM)
    with pytest.raises(CorruptObject, match="tensor 'x'.*does not decode.*checksum"):
        read(*hostile(_flip_literal(stored, RANDOM), shape=(2 * len(RANDOM),)))


def test_a_frame_without_a_checksum_is_refused() -> None:
    """What the test above relies on: a frame without a checksum would decode to wrong bytes unseen."""
    stored = _flip_literal(frame(RANDOM + RANDOM, write_checksum=False), RANDOM)
    wrong = zstd.ZstdDecompressor().decompress(stored)
    assert len(wrong) == 2 * len(RANDOM) and wrong != RANDOM + RANDOM
    with pytest.raises(CorruptObject, match="tensor 'x'.*carries no content checksum"):
        read(*hostile(stored, shape=(2 * len(RANDOM),)))


def _declare(frame_bytes: bytes, size: int) -> bytes:
    """``frame_bytes`` with its header's content size field rewritten to ``size`` (zstd has no header checksum)."""
    fhd = frame_bytes[4]
    fcs_flag, single, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single else 0, 2, 4, 8)[fcs_flag]
    assert width >= 2
    value = size - 256 if width == 2 else size
    return frame_bytes[:at] + value.to_bytes(width, "little") + frame_bytes[at + width :]


def test_a_decompression_bomb_is_refused_without_decoding_its_output() -> None:
    """256 MiB of zeros declared as 4 KiB: refused, with well under the real output allocated."""
    chunk = bytes(8 << 20)
    cobj = zstd.ZstdCompressor(level=1, write_content_size=True, write_checksum=True).compressobj(size=32 * len(chunk))
    bomb = b"".join([*(cobj.compress(chunk) for _ in range(32)), cobj.flush()])
    assert len(bomb) < 64 << 10  # about 8 KiB stored: within the ratio a shape may claim
    data, at = hostile(_declare(bomb, 4096), shape=(4096,))
    del chunk
    tracemalloc.start()
    try:
        with pytest.raises(CorruptObject, match="tensor 'x'.*does not decode to its 4096 bytes"):
            read(data, at)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_a_shape_beyond_what_the_stored_bytes_can_decode_to_is_refused_before_any_allocation() -> None:
    data, at = hostile(frame(PAYLOAD), shape=(1 << 40,))
    footer = parse_footer(data[at:], key="k", size=len(data), footer_offset=at)
    with pytest.raises(CorruptObject, match="more than zstd can decode"):
        footer.slice(0)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"codecs": ["brotli"]}, "codec 'brotli' is unknown to this torch_tgb.*upgrade torch_tgb"),
        ({"codecs": ["zstd:abc"]}, "is not NAME"),
        ({"codecs": ["zstd"], "number": 2}, "codec #2, but the footer names 1"),
        ({"codecs": []}, "names 1 to 255 codecs"),
        ({"codecs": [7]}, "names 1 to 255 codecs as strings"),
        ({"version": 3}, "version 3 names codecs \\(they need version 4\\)"),
        ({"codecs": ["zstd+delta:3x14x14"]}, "the delta block \\[3, 14, 14\\] holds 588"),
    ],
)
def test_codecs_a_reader_cannot_name_or_apply_are_refused(options, match) -> None:
    with pytest.raises(CorruptObject, match=match):
        read(*hostile(frame(PAYLOAD), shape=(len(PAYLOAD), 1), **options))
