"""Tensors stored compressed at rest (format version 4): round trips on every read path, what is recorded, who refuses.

A producer chooses a codec per key (``encode_tgb(codecs=)``); the footer names
the codecs and numbers each tensor's; CRCs are over the stored bytes; every
read path (a mapping, a copy, fetched bytes, a run of one mapped object)
decodes into one fresh buffer; an object without codecs stays version 3.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tgb.format._footer as footer_module
from torch_tgb.errors import CorruptObject, SchemaMismatch
from torch_tgb.format import (
    CODEC_VERSION,
    FORMAT_VERSION,
    SliceData,
    SliceReader,
    decode_slice,
    encode_tgb,
    parse_codec,
    parse_footer,
    read_footer,
    write_tgb,
)
from torch_tgb.format._delta import delta_decode, delta_encode
from torch_tgb.layout import Layout
from torch_tgb.storage import MemoryStore
from torch_tgb.testing.media import photos
from torch_tgb.transforms.vision import patchify, resize_frames

pytest.importorskip("zstandard")

IMAGE_CODEC = "zstd:1+delta:3x14x14"


def _patches(n: int = 4, side: int = 112) -> list[torch.Tensor]:
    """Patches of real photographs (skimage.data), or drawn ones where scikit-image is missing."""
    frames = [torch.from_numpy(p) for p in photos()[:n]]
    if not frames:
        from torch_tgb.testing.media import synthetic_image

        frames = [torch.from_numpy(synthetic_image(200, 300, seed)) for seed in range(n)]
    return [patchify(resize_frames(f, (side, side)), 14, merge=2)[0] for f in frames]


def _batch() -> dict[str, object]:
    pv = _patches()
    return {"ids": torch.arange(12, dtype=torch.int16).reshape(4, 3), "pixel_values": pv}


def _encode(batch: dict, codecs: dict | None, dp: int = 2, key: str = "k") -> tuple[bytes, object, list[SliceData]]:
    layout = Layout(dp=dp)
    slices = layout.cut(batch)
    buffers, obj = encode_tgb(slices, layout=layout, codecs=codecs, key=key)
    return b"".join(bytes(b) for b in buffers), obj, slices


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype and torch.equal(got[name], want[name]), name


@pytest.mark.parametrize("codec", ["zstd", "zstd:9", IMAGE_CODEC])
def test_a_coded_key_round_trips_fewer_bytes_version_4_crc_of_the_stored_bytes(codec) -> None:
    batch = _batch()
    plain, plain_obj, _ = _encode(batch, None)
    data, obj, slices = _encode(batch, {"pixel_values": codec})
    footer = parse_footer(data[obj.footer_offset :], key="k", size=obj.size, footer_offset=obj.footer_offset)
    assert footer.version == CODEC_VERSION and int.from_bytes(data[-12:-8], "little") == CODEC_VERSION
    assert [c.spec for c in footer.codecs] == [parse_codec(codec).spec]
    assert obj.size < plain_obj.size
    for d in range(2):
        info = footer.slice(d)
        coded = {t.name: t for t in info.tensors}
        assert coded["pixel_values"].codec == parse_codec(codec) and coded["ids"].codec is None
        t = coded["pixel_values"]
        assert t.length < t.nbytes  # stored compressed; its CRC is the stored bytes'
        from torch_tgb.format._crc import crc32c_of

        assert crc32c_of(data[t.offset : t.offset + t.length]) == t.crc32c
        _same(decode_slice(data, info, key="k"), slices[d].tensors)


def test_objects_without_codecs_stay_version_3_and_an_older_reader_refuses_version_4(monkeypatch) -> None:
    """Older readers keep reading what they can; a reader of version 3 refuses a coded object, naming the upgrade."""
    store = MemoryStore("compress-versions")
    layout = Layout(dp=2)
    write_tgb(store, "plain", layout.cut(_batch()), layout=layout)
    write_tgb(store, "coded", layout.cut(_batch()), layout=layout, codecs={"pixel_values": "zstd"})
    assert read_footer(store, "plain").version == FORMAT_VERSION == 3
    monkeypatch.setattr(footer_module, "FORMAT_VERSIONS", (1, 2, 3))  # a reader before compression
    assert read_footer(store, "plain").version == 3
    with pytest.raises(CorruptObject, match="unknown TGB format version 4.*newer torch_tgb; upgrade"):
        read_footer(store, "coded")
    store.close()


def test_a_reader_blind_to_codecs_refuses_a_coded_row_by_its_length(monkeypatch) -> None:
    """A version-3 reader of slice records only (no trailer, no version) ignores meta "codecs" and the row's
    codec number: a coded row's stored length is never its shape's bytes, so it refuses, never misreads."""
    data, obj, _ = _encode(_batch(), {"pixel_values": IMAGE_CODEC})
    monkeypatch.setattr(footer_module, "codec_table", lambda specs, version: ())  # as such a reader parses
    footer_module._parse_meta.cache_clear()
    try:
        footer = parse_footer(data[obj.footer_offset :], key="k", size=obj.size, footer_offset=obj.footer_offset)
        with pytest.raises(CorruptObject, match="tensor 'pixel_values': shape .* needs \\d+ bytes, footer says"):
            footer.slice(0)
    finally:
        footer_module._parse_meta.cache_clear()


def test_an_incompressible_tensor_is_stored_as_it_is_and_never_grows() -> None:
    noise = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (8, 588), dtype=np.uint8))
    data, obj, slices = _encode({"pixel_values": noise}, {"pixel_values": "zstd"}, dp=1)
    footer = parse_footer(data[obj.footer_offset :], key="k", size=obj.size, footer_offset=obj.footer_offset)
    (t,) = footer.slice(0).tensors
    assert t.codec is None and t.length == t.nbytes == noise.numel()
    assert footer.version == CODEC_VERSION  # the producer chose a codec: the object says so, stably
    _same(decode_slice(bytearray(data), footer.slice(0), key="k"), slices[0].tensors)


@pytest.mark.parametrize("mode", ["mmap", "copy"])
def test_every_read_path_decodes_a_coded_slice_into_one_writable_buffer(file_store, mode) -> None:
    store = file_store
    layout = Layout(dp=2)
    slices = layout.cut(_batch())
    write_tgb(store, "o", slices, layout=layout, codecs={"pixel_values": IMAGE_CODEC, "ids": "zstd"})
    footer = read_footer(store, "o")
    reader = SliceReader(store, verify="first", mode=mode)
    for _ in range(2):  # verified once, then read unverified: the same tensors
        for d in range(2):
            got = reader.read("o", footer, footer.slice(d))
            _same(got, slices[d].tensors)
            ptrs = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in got.values()]
            span = max(hi for _, hi in ptrs) - min(lo for lo, _ in ptrs)
            assert span <= footer.slice(d).decoded.end  # one buffer laid out as a plain slice
            got["pixel_values"] += 1  # writable, and never the file's bytes
    remote = MemoryStore("compress-remote")
    remote.put("o", store.get("o"))
    fetched = SliceReader(remote, verify="always")
    for d in range(2):
        info = footer.slice(d)
        _same(fetched.read_fetched("o", remote.get_range("o", info.start, info.end), info), slices[d].tensors)
        _same(fetched.read("o", footer, info), slices[d].tensors)
    runs = SliceReader(store, verify="always").runs("o", footer.size, [(footer.footer_offset, footer.size)],
                                                    [(0, 0), (1, 0)])
    assert runs is not None
    for d, run in enumerate(runs):
        _same(run.read(0), slices[d].tensors)
    remote.close()


def test_a_flipped_stored_byte_fails_its_crc_naming_the_tensor() -> None:
    data, obj, _ = _encode(_batch(), {"pixel_values": IMAGE_CODEC}, dp=1)
    footer = parse_footer(data[obj.footer_offset :], key="k", size=obj.size, footer_offset=obj.footer_offset)
    t = next(t for t in footer.slice(0).tensors if t.name == "pixel_values")
    bad = bytearray(data)
    bad[t.offset + t.length // 2] ^= 0x40
    with pytest.raises(CorruptObject, match="tensor 'pixel_values': CRC32C mismatch"):
        decode_slice(bad, footer.slice(0), key="k")


@pytest.mark.parametrize(
    ("codecs", "match"),
    [
        ({"pixels": "zstd"}, "'pixels', which the batch does not hold"),
        ({"pixel_values": "brotli"}, "codec 'brotli' is unknown"),
        ({"pixel_values": "zstd:99"}, "level 99 is outside"),
        ({"pixel_values": "zstd+delta:3x14"}, "the delta block \\[3, 14\\] holds 42"),
        ({"pixel_values": "zstd+gzip"}, "is not NAME"),
        ({"scores": "zstd+delta:4"}, "needs an integer dtype"),
    ],
)
def test_a_writer_refuses_codecs_it_cannot_apply_naming_the_key(codecs, match) -> None:
    batch = {**_batch(), "scores": torch.rand(4, 4)}
    with pytest.raises(SchemaMismatch, match=match):
        _encode(batch, codecs)


@settings(max_examples=60, deadline=None)
@given(
    block=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
    items=st.integers(0, 6),
    dtype=st.sampled_from([np.uint8, np.int8, np.uint16, np.int32, np.int64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_delta_decode_undoes_delta_encode_for_any_block_and_integer_dtype(block, items, dtype, seed) -> None:
    info = np.iinfo(dtype)
    array = np.random.default_rng(seed).integers(info.min, info.max, (items, int(np.prod(block))), dtype=dtype,
                                                 endpoint=True)
    for short_runs in ("numpy", "torch", None):  # each axis of short runs by numpy adds, torch's cumsum_, or as chosen
        work = array.copy()
        delta_encode(work, block)
        delta_decode(work, block, short_runs=short_runs)
        assert np.array_equal(work, array), short_runs


@pytest.mark.parametrize("block", [(3, 14, 14), (3, 2, 14, 14), (2, 70)])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("short_runs", ["numpy", "torch"])
def test_delta_decode_of_patch_blocks_by_either_way_is_exact(block, dtype, short_runs) -> None:
    """Patch blocks mix axes of long runs (colour planes: numpy adds) and short ones (rows, columns): each way of
    summing the short ones undoes the filter bit for bit, wrapping included."""
    array = np.random.default_rng(7).integers(0, 256, (33, int(np.prod(block))), dtype=np.uint8).view(dtype)
    work = array.copy()
    delta_encode(work, block)
    delta_decode(work, block, short_runs=short_runs)
    assert np.array_equal(work, array)


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(st.integers(0, 5), min_size=2, max_size=6), seed=st.integers(0, 2**16))
def test_ragged_coded_keys_round_trip_with_empty_rows_and_any_dp(rows, seed) -> None:
    rng = np.random.default_rng(seed)
    values = [torch.from_numpy(rng.integers(0, 4, (n, 2, 3), dtype=np.uint8)) for n in rows]
    batch = {"sid": torch.arange(len(rows)), "v": values}
    dp = 2 if len(rows) % 2 == 0 else 1
    data, obj, slices = _encode(batch, {"v": "zstd+delta:2x3", "v_offsets": "zstd", "sid": "zstd:1"}, dp=dp)
    footer = parse_footer(data[obj.footer_offset :], key="k", size=obj.size, footer_offset=obj.footer_offset)
    for d in range(dp):
        _same(decode_slice(data, footer.slice(d), key="k"), slices[d].tensors)


def test_without_zstandard_coded_objects_and_codec_choices_name_the_extra(monkeypatch, tmp_path) -> None:
    import sys

    from torch_tgb.errors import MissingExtra
    from torch_tgb.layout import Layout as _Layout
    from torch_tgb.producer import Producer

    data, obj, _ = _encode(_batch(), {"pixel_values": "zstd"}, dp=1)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now raises ImportError
    footer = parse_footer(data[obj.footer_offset :], key="k", size=obj.size, footer_offset=obj.footer_offset)
    with pytest.raises(MissingExtra, match=r"pip install 'torch-tgb\[compress\]'"):
        decode_slice(bytearray(data), footer.slice(0), key="k")
    with pytest.raises(MissingExtra, match=r"torch-tgb\[compress\]"):
        Producer(str(tmp_path / "ns"), producer_id="p", layout=_Layout(dp=1), codecs={"pixel_values": "zstd"})
    assert not (tmp_path / "ns" / "data").exists()  # refused before anything was written


def test_decoding_writes_into_the_tensors_buffer_with_no_copy_of_the_tensor_on_the_way() -> None:
    """zstd decodes straight into the destination and the delta filter is undone there: what the decode allocates
    besides is a small fraction of the tensor (decoding to fresh bytes and copying them allocated all of it)."""
    import tracemalloc

    items = np.add.outer(np.arange(4096), np.arange(3 * 14 * 14)).astype(np.uint8)  # 2.4 MB of smooth 'patches'
    codec = parse_codec(IMAGE_CODEC)
    stored = codec.encode(items)
    dst = bytearray(items.nbytes)
    codec.decode_into(memoryview(stored), memoryview(dst), dtype=items.dtype, shape=items.shape, where="warm-up")
    dst[:] = bytes(len(dst))
    tracemalloc.start()
    try:
        codec.decode_into(memoryview(stored), memoryview(dst), dtype=items.dtype, shape=items.shape, where="t")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bytes(dst) == items.tobytes()
    assert peak < items.nbytes // 16
