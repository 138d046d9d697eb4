"""LLMBATCH files: exact header layout, round trip, corrupt headers, conversion to a namespace."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from torch_tgb.errors import CorruptObject, LayoutError
from torch_tgb.format.llmbatch import HEADER_SIZE, LLMBatchHeader, LLMBatchReader, write_llmbatch
from torch_tgb.offline import convert_llmbatch
from torch_tgb.layout import Layout


def _records(n: int = 100, seq: int = 512) -> np.ndarray:
    return (np.arange(n * seq, dtype=np.int64).reshape(n, seq) % 50_000).astype(np.uint32)


def test_header_bytes_match_the_spec(tmp_path):
    path = tmp_path / "d.batch"
    header = write_llmbatch(path, _records(100), batch_size=32, seed=42)
    raw = path.read_bytes()
    assert raw[:8] == b"LLMBATCH"
    assert struct.unpack_from("<IIIQIII", raw, 8) == (1, 32, 512, 3, 0, 42, 100)
    assert raw[40:HEADER_SIZE] == bytes(HEADER_SIZE - 40)
    # 32 x 512 x 4 = 64 KiB, already page-aligned; remainder of 4 records dropped
    assert header.padded_batch_bytes == 65536 and len(raw) == 4096 + 3 * 65536 == header.file_size


def test_round_trip_with_padding_and_shuffle(tmp_path):
    recs = _records(50, seq=7)  # 4 x 7 x 4 = 112 bytes, padded to 4096
    path = tmp_path / "p.batch"
    header = write_llmbatch(path, recs, batch_size=4, seed=9)
    order = np.random.default_rng(9).permutation(50)
    with LLMBatchReader(path) as reader:
        assert (reader.num_batches, reader.batch_size, reader.seq_len, len(reader)) == (12, 4, 7, 12)
        assert reader.header == header
        for b in range(12):
            assert np.array_equal(reader.read_batch(b), recs[order[b * 4 : (b + 1) * 4]])
        t = reader.read_batch_torch(3)
        assert t.dtype == torch.int64 and t.shape == (4, 7)
        u = reader.read_batch_torch(3, dtype=None)
        assert u.dtype == torch.uint32 and torch.equal(u.to(torch.int64), t)
        with pytest.raises(IndexError):
            reader.read_batch(12)
    assert (tmp_path / "p.batch").stat().st_size == 4096 + 12 * 4096


def test_unshuffled_and_empty(tmp_path):
    recs = _records(8, seq=3)
    write_llmbatch(tmp_path / "s.batch", recs, batch_size=4, shuffle=False)
    assert np.array_equal(LLMBatchReader(tmp_path / "s.batch").read_batch(1), recs[4:])
    write_llmbatch(tmp_path / "e.batch", recs[:3], batch_size=4)
    assert LLMBatchReader(tmp_path / "e.batch").num_batches == 0


@pytest.mark.parametrize(
    "patch,match",
    [
        ((0, b"LLMBATCX"), "bad magic"),
        ((8, struct.pack("<I", 2)), "unknown version 2"),
        ((28, struct.pack("<I", 7)), "dtype code 7"),
        ((12, struct.pack("<I", 0)), "batch_size=0"),
        ((20, struct.pack("<Q", 1 << 50)), "truncated or corrupt header"),
        ((16, struct.pack("<I", 100_000)), "truncated or corrupt header"),
    ],
)
def test_corrupt_header(tmp_path, patch, match):
    path = tmp_path / "c.batch"
    write_llmbatch(path, _records(64, seq=16), batch_size=8)
    raw = bytearray(path.read_bytes())
    at, data = patch
    raw[at : at + len(data)] = data
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptObject, match=match):
        LLMBatchReader(path)


def test_truncated_file(tmp_path):
    path = tmp_path / "t.batch"
    write_llmbatch(path, _records(64, seq=16), batch_size=8)
    raw = path.read_bytes()
    path.write_bytes(raw[:-1])
    with pytest.raises(CorruptObject, match=r"t\.batch"):
        LLMBatchReader(path)
    path.write_bytes(raw[:100])
    with pytest.raises(CorruptObject, match="smaller than the 4096-byte header"):
        LLMBatchReader(path)


def test_writer_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError):
        write_llmbatch(tmp_path / "x", np.zeros(5), batch_size=2)
    with pytest.raises(ValueError):
        write_llmbatch(tmp_path / "x", np.full((4, 2), -1), batch_size=2)
    with pytest.raises(ValueError):
        write_llmbatch(tmp_path / "x", np.zeros((4, 2)), batch_size=0)
    assert not (tmp_path / "x").exists()


def test_header_pack_parse_round_trip():
    h = LLMBatchHeader(1, 32, 512, 10, 0, 1, 320)
    assert LLMBatchHeader.parse(h.pack(), path="mem", file_size=h.file_size) == h


def test_convert_to_sealed_namespace(tmp_path, read_back):
    recs = _records(40, seq=16)
    src = tmp_path / "src.batch"
    write_llmbatch(src, recs, batch_size=8, seed=1)
    ns = str(tmp_path / "ns")
    layout = Layout(dp=2, cp=2, seq_keys=("input_ids", "labels"), cp_order="zigzag")
    summary = convert_llmbatch(src, ns, layout=layout, progress=False)
    assert summary["batches"] == 5 and summary["resumed_at"] == 0 and summary["tokens"] == 5 * 8 * 16
    batches, got_layout, sealed = read_back(ns)
    assert sealed and got_layout == layout and len(batches) == 5
    with LLMBatchReader(src) as reader:
        for i, batch in enumerate(batches):
            want = reader.read_batch_torch(i)
            assert torch.equal(batch["input_ids"], want)
            assert torch.equal(batch["labels"][:, :-1], want[:, 1:]) and (batch["labels"][:, -1] == -100).all()
    # idempotent: a rerun finds it sealed and complete
    assert convert_llmbatch(src, ns, layout=layout, progress=False)["resumed_at"] == 5


def test_convert_keeps_uint32_and_checks_layout(tmp_path, read_back):
    src = tmp_path / "u.batch"
    write_llmbatch(src, _records(12, seq=8), batch_size=6)
    ns = str(tmp_path / "ns")
    convert_llmbatch(src, ns, layout=Layout(dp=3), dtype=None, labels=False, progress=False)
    batches, _, _ = read_back(ns)
    assert set(batches[0]) == {"input_ids"} and batches[0]["input_ids"].dtype == torch.uint32
    with pytest.raises(LayoutError, match="dp=4"):
        convert_llmbatch(src, str(tmp_path / "ns2"), layout=Layout(dp=4), progress=False)
