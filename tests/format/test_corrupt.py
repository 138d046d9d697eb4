"""Bad objects fail loud with CorruptObject naming object, slice and tensor."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_tgb.errors import CorruptObject, TGBError
from torch_tgb.format import TRAILER_SIZE, SliceData, SliceReader, read_footer, read_slice, write_tgb
from torch_tgb.format._footer import _HEADER, _TENSOR_ROW, crc32c_of
from torch_tgb.storage import MemoryStore

KEY = "data/p/x.tgb"


def _good(store) -> bytes:
    """A version-2 object: these tests rewrite the tables where versions 1-2 keep them (after the meta).
    Version 3's records are corrupted in tests/format/test_records.py."""
    slices = [
        SliceData(d, c, {"ids": torch.arange(64, dtype=torch.int64) + d, "mask": torch.ones(8, dtype=torch.bool)})
        for d in range(2)
        for c in range(2)
    ]
    write_tgb(store, KEY, slices, format_version=2)
    return store.get(KEY)


def _trailer(blob: bytes) -> tuple[int, int, int, bytes]:
    return struct.unpack("<QII8s", blob[-TRAILER_SIZE:])


def _refooter(blob: bytes, mutate) -> bytes:
    """Rewrite the footer body with ``mutate(bytearray)`` and fix its CRC: a well-formed lie."""
    length, _crc, version, magic = _trailer(blob)
    start = len(blob) - TRAILER_SIZE - length
    body = bytearray(blob[start : start + length])
    mutate(body)
    return blob[:start] + bytes(body) + struct.pack("<QII8s", length, crc32c_of(bytes(body)), version, magic)


def _tensor_table_at(body: bytearray) -> int:
    _m, _v, _f, dp, cp, nslices, _nt, _nd, meta_len = _HEADER.unpack_from(body, 0)
    return _HEADER.size + meta_len + (-meta_len % 8) + nslices * 32


@pytest.fixture(autouse=True, params=["python", "numpy"])
def table_checks(request, monkeypatch):
    """Run every corruption test through both footer table checkers."""
    from torch_tgb.format import _checks

    monkeypatch.setattr(_checks, "SMALL_TABLE", 1 << 30 if request.param == "python" else -1)
    return request.param


@pytest.fixture
def store():
    s = MemoryStore("corrupt")
    s.destroy()
    return s


def test_wrong_magic(store):
    blob = _good(store)
    store.put(KEY, blob[:-8] + b"NOTMAGIC")
    with pytest.raises(CorruptObject, match=r"data/p/x\.tgb.*magic"):
        read_footer(store, KEY)


def test_unknown_version(store):
    blob = _good(store)
    length, crc, _version, magic = _trailer(blob)
    store.put(KEY, blob[:-TRAILER_SIZE] + struct.pack("<QII8s", length, crc, 99, magic))
    with pytest.raises(CorruptObject, match="version 99"):
        read_footer(store, KEY)


@pytest.mark.parametrize("cut", [1, 100, TRAILER_SIZE, 5000])
def test_truncated_object(store, cut):
    blob = _good(store)
    store.put(KEY, blob[:-cut])
    with pytest.raises(CorruptObject, match=r"x\.tgb"):
        read_footer(store, KEY)


def test_truncated_with_known_location(store):
    blob = _good(store)
    footer = read_footer(store, KEY)
    store.put(KEY, blob[:-10])
    with pytest.raises(CorruptObject):
        read_footer(store, KEY, size=len(blob), footer_offset=footer.footer_offset, footer_length=footer.footer_length)
    with pytest.raises(CorruptObject, match="does not end"):
        read_footer(store, KEY, size=len(blob), footer_offset=footer.footer_offset, footer_length=footer.footer_length + 1)


def test_tiny_and_empty_objects(store):
    for blob in (b"", b"x" * 10):
        store.put(KEY, blob)
        with pytest.raises(CorruptObject, match="truncated"):
            read_footer(store, KEY)


def test_footer_length_absurd(store):
    blob = _good(store)
    _length, crc, version, magic = _trailer(blob)
    store.put(KEY, blob[:-TRAILER_SIZE] + struct.pack("<QII8s", 1 << 60, crc, version, magic))
    with pytest.raises(CorruptObject, match="does not fit"):
        read_footer(store, KEY)


def test_footer_crc_mismatch(store):
    blob = bytearray(_good(store))
    blob[-TRAILER_SIZE - 40] ^= 0xFF
    store.put(KEY, bytes(blob))
    with pytest.raises(CorruptObject, match="footer CRC32C"):
        read_footer(store, KEY)


def test_payload_crc_mismatch_names_slice_and_tensor(store, tmp_path):
    _good(store)
    footer = read_footer(store, KEY)
    info = footer.slice(1, 0)
    blob = bytearray(store.get(KEY))
    blob[info.tensors[1].offset] ^= 0x01  # flip a bit of 'mask' in slice (1, 0)
    store.put(KEY, bytes(blob))
    with pytest.raises(CorruptObject, match=r"x\.tgb.*dp=1, cp=0.*'mask'.*CRC32C"):
        read_slice(store, KEY, footer, info)
    # with verification off (benchmarks) the bytes come through unchecked
    out = read_slice(store, KEY, footer, info, verify=False)
    assert out["mask"].shape == (8,)
    # other slices are unaffected
    read_slice(store, KEY, footer, footer.slice(0, 1))


def test_payload_crc_mismatch_via_mmap(file_store):
    _good(file_store)
    footer = read_footer(file_store, KEY)
    info = footer.slice(0, 1)
    path = file_store.local_path(KEY)
    with open(path, "r+b") as f:
        f.seek(info.tensors[0].offset + 3)
        f.write(b"\xff")
    with pytest.raises(CorruptObject, match=r"dp=0, cp=1.*'ids'"):
        SliceReader(file_store).read(KEY, footer, info)


def test_file_shorter_than_footer_says(file_store):
    blob = _good(file_store)
    footer = read_footer(file_store, KEY)
    with open(file_store.local_path(KEY), "r+b") as f:
        f.truncate(len(blob) - 100)
    with pytest.raises(CorruptObject, match="truncated"):
        SliceReader(file_store).read(KEY, footer, footer.slice(0, 0))


def test_short_remote_read(store):
    _good(store)
    footer = read_footer(store, KEY)
    store.put(KEY, store.get(KEY)[: footer.slice(1, 1).start + 10])
    with pytest.raises(CorruptObject, match=r"dp=1, cp=1.*truncated"):
        read_slice(store, KEY, footer, footer.slice(1, 1))


def test_footer_pointing_outside_object(store):
    blob = _good(store)

    def move(body: bytearray) -> None:
        at = _tensor_table_at(body)
        row = np.frombuffer(body, dtype=_TENSOR_ROW, count=1, offset=at).copy()
        row["offset"] = 1 << 40
        body[at : at + 32] = row.tobytes()

    store.put(KEY, _refooter(blob, move))
    with pytest.raises(CorruptObject, match=r"x\.tgb', slice \(dp=0, cp=0\), tensor 'ids'.*beyond"):
        read_footer(store, KEY)


def test_shape_disagrees_with_length(store):
    blob = _good(store)

    def grow(body: bytearray) -> None:
        at = _tensor_table_at(body)
        row = np.frombuffer(body, dtype=_TENSOR_ROW, count=1, offset=at).copy()
        row["length"] = 8
        body[at : at + 32] = row.tobytes()

    store.put(KEY, _refooter(blob, grow))
    footer = read_footer(store, KEY)  # bounds are fine, the lie shows when the slice is used
    with pytest.raises(CorruptObject, match=r"slice \(dp=0, cp=0\), tensor 'ids'.*needs 512 bytes"):
        footer.slice(0, 0)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("dp", 7, "dp=7"),
        ("meta_len", 1 << 30, "inconsistent"),
        ("nslices", 1 << 31, "inconsistent"),
    ],
)
def test_absurd_header_counts(store, field, value, match):
    blob = _good(store)
    names = ["magic", "version", "flags", "dp", "cp", "nslices", "ntensors", "ndims", "meta_len"]

    def edit(body: bytearray) -> None:
        fields = list(_HEADER.unpack_from(body, 0))
        fields[names.index(field)] = value
        body[: _HEADER.size] = _HEADER.pack(*fields)

    store.put(KEY, _refooter(blob, edit))
    with pytest.raises(CorruptObject, match=match):
        read_footer(store, KEY)


def test_footer_json_is_not_executed_or_deep(store):
    blob = _good(store)

    def deep(body: bytearray) -> None:
        _m, _v, _f, dp, cp, ns, nt, nd, meta_len = _HEADER.unpack_from(body, 0)
        start = _HEADER.size
        bad = b"[" * (meta_len // 2) + b"]" * (meta_len // 2) + b" " * (meta_len % 2)
        body[start : start + meta_len] = bad

    store.put(KEY, _refooter(blob, deep))
    with pytest.raises(CorruptObject, match="JSON"):
        read_footer(store, KEY)


def test_missing_slice_request(store):
    _good(store)
    footer = read_footer(store, KEY)
    with pytest.raises(CorruptObject, match=r"no slice \(dp=2, cp=0\)"):
        footer.slice(2, 0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_footer_bytes_never_crash_untyped(store, data):
    blob = bytearray(_good(store))
    footer_start = len(blob) - TRAILER_SIZE - _trailer(bytes(blob))[0]
    n = data.draw(st.integers(1, 8))
    for _ in range(n):
        i = data.draw(st.integers(footer_start, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    fix_crc = data.draw(st.booleans())
    if fix_crc:
        blob = bytearray(_refooter(bytes(blob), lambda body: None))
    store.put(KEY, bytes(blob))
    try:
        footer = read_footer(store, KEY)
        for info in footer.slices():
            read_slice(store, KEY, footer, info)
    except TGBError:
        pass  # a typed, named error is the only allowed failure
