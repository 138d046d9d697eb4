"""Writing and reading TGB objects: every dtype, per-slice shapes, mmap and range reads."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
import torch

from torch_tgb.format._spec import PAGE_ALIGN_FROM, V3_SLICE_ALIGN
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.format import (
    DTYPES,
    SLICE_ALIGN,
    TRAILER_SIZE,
    SliceData,
    SliceReader,
    decode_slice,
    encode_tgb,
    read_footer,
    read_slice,
    write_tgb,
)
from torch_tgb.layout import Layout


def _tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def _grid(dp: int, cp: int, make) -> list[SliceData]:
    return [SliceData(d, c, make(d, c)) for d in range(dp) for c in range(cp)]


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].shape == b[name].shape, name
        assert torch.equal(a[name], b[name]), name


def test_every_dtype_round_trips(any_store):
    slices = _grid(2, 2, lambda d, c: {dt.name: _tensor(dt.torch_dtype, (3, 5), 10 * d + c) for dt in DTYPES})
    obj = write_tgb(any_store, "data/p/a.tgb", slices)
    footer = read_footer(any_store, obj.key, size=obj.size, footer_offset=obj.footer_offset, footer_length=obj.footer_length)
    assert (footer.dp, footer.cp, footer.num_slices) == (2, 2, 4)
    for s in slices:
        info = footer.slice(s.dp, s.cp)
        assert info.start % V3_SLICE_ALIGN == 0  # small slices: 64-byte aligned (version 3)
        _same(read_slice(any_store, obj.key, footer, info), s.tensors)


def test_object_geometry_and_footer_without_hints(mem_store):
    slices = _grid(3, 1, lambda d, c: {"x": torch.arange(10 * (d + 1), dtype=torch.int32)})
    obj = write_tgb(mem_store, "o.tgb", slices)
    assert obj.size == len(mem_store.get("o.tgb"))
    assert obj.footer_offset + obj.footer_length + TRAILER_SIZE == obj.size
    footer = read_footer(mem_store, "o.tgb")  # tail read, size looked up
    assert footer.footer_offset == obj.footer_offset
    starts = [footer.slice(d, 0).start for d in range(3)]
    assert starts == sorted(starts) and all(s % 64 == 0 for s in starts)
    big = _grid(2, 1, lambda d, c: {"x": torch.zeros(PAGE_ALIGN_FROM, dtype=torch.uint8)})
    large = read_footer(mem_store, write_tgb(mem_store, "big.tgb", big).key)
    assert all(large.slice(d, 0).start % 4096 == 0 for d in range(2))  # large slices: on pages
    # shapes differ per slice (pre-cut, cost-balanced slices)
    assert [footer.slice(d, 0).tensors[0].shape for d in range(3)] == [(10,), (20,), (30,)]


def test_footer_records_layout_schema_metadata(mem_store):
    layout = Layout(dp=2, cp=1, seq_keys=("x",))
    slices = layout.cut({"x": torch.zeros(4, 8, dtype=torch.int64)})
    write_tgb(mem_store, "o.tgb", slices, layout=layout, schema={"x": {"dtype": "int64", "shape": [8]}}, metadata={"a": 1})
    footer = read_footer(mem_store, "o.tgb")
    assert Layout.from_json(footer.layout) == layout
    assert footer.schema == {"x": {"dtype": "int64", "shape": [8]}}
    assert footer.metadata == {"a": 1}


def test_large_footer_needs_second_read(mem_store):
    # 2048 slices: footer > the 64 KiB tail read
    slices = _grid(2048, 1, lambda d, c: {"a": torch.tensor([d]), "b": torch.tensor([d]), "c": torch.tensor([d])})
    obj = write_tgb(mem_store, "big.tgb", slices)
    assert obj.footer_length > 64 << 10
    footer = read_footer(mem_store, "big.tgb")
    assert footer.slice(2047, 0).tensors[0].name == "a"
    assert read_slice(mem_store, "big.tgb", footer, footer.slice(2047, 0))["c"].item() == 2047


def test_zero_size_and_scalar_like_tensors(any_store):
    slices = _grid(1, 1, lambda d, c: {"empty": torch.zeros(0, 7), "one": torch.tensor([3.5])})
    obj = write_tgb(any_store, "z.tgb", slices)
    footer = read_footer(any_store, obj.key)
    out = read_slice(any_store, obj.key, footer, footer.slice(0, 0))
    assert out["empty"].shape == (0, 7) and out["one"].item() == 3.5


def test_mmap_read_is_zero_copy_and_writes_stay_private(file_store, tmp_path):
    x = torch.arange(32 * 512).to(torch.uint32).reshape(32, 512)
    obj = write_tgb(file_store, "m.tgb", [SliceData(0, 0, {"x": x})])
    footer = read_footer(file_store, "m.tgb")
    reader = SliceReader(file_store)
    a = reader.read("m.tgb", footer, footer.slice(0, 0))["x"]
    b = reader.read("m.tgb", footer, footer.slice(0, 0))["x"]
    assert torch.equal(a, x)
    # both tensors view the same cached mapping: no payload copy
    assert a.data_ptr() == b.data_ptr()
    assert a.data_ptr() % 4096 == 0
    a[0, 0] = 7  # copy-on-write: the file is untouched
    with open(tmp_path / "m.tgb", "rb") as f:
        raw = np.frombuffer(f.read(), dtype=np.uint32, count=1)
    assert raw[0] == 0
    fresh = read_slice(file_store, "m.tgb", footer, footer.slice(0, 0))["x"]
    assert fresh[0, 0].item() == 0
    assert obj.size == (tmp_path / "m.tgb").stat().st_size


def test_decode_slice_views_the_buffer(mem_store):
    buffers, obj = encode_tgb([SliceData(0, 0, {"x": torch.arange(100, dtype=torch.int64)})])
    assert obj.key is None
    blob = bytearray(b"".join(buffers))
    mem_store.put("e.tgb", bytes(blob))
    footer = read_footer(mem_store, "e.tgb")
    info = footer.slice(0, 0)
    x = decode_slice(blob, info, base_offset=0)["x"]
    blob[info.tensors[0].offset] = 42  # the tensor is a view of blob
    assert x[0].item() == 42
    assert torch.equal(decode_slice(blob, info, verify=False)["x"], x)


def test_reader_uses_get_range_into_when_available(mem_store):
    calls = []

    class IntoStore(type(mem_store)):
        def get_range_into(self, key, start, out):
            calls.append((key, start, len(out)))
            data = self.get_range(key, start, start + len(out))
            out[: len(data)] = data
            return len(data)

    store = IntoStore(mem_store.name)
    write_tgb(store, "i.tgb", [SliceData(0, 0, {"x": torch.arange(10)})])
    footer = read_footer(store, "i.tgb")
    x = SliceReader(store).read("i.tgb", footer, footer.slice(0, 0))["x"]
    assert torch.equal(x, torch.arange(10)) and len(calls) == 1
    x[0] = 5  # a writable private buffer


def test_non_contiguous_and_noncpu_like_inputs(mem_store):
    base = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    slices = [SliceData(0, 0, {"t": base.t(), "s": base[:, 1:3]})]
    write_tgb(mem_store, "nc.tgb", slices)
    footer = read_footer(mem_store, "nc.tgb")
    _same(read_slice(mem_store, "nc.tgb", footer, footer.slice(0, 0)), {"t": base.t().contiguous(), "s": base[:, 1:3].contiguous()})


@settings(max_examples=30, deadline=None)
@given(
    dp=st.integers(1, 4),
    cp=st.integers(1, 3),
    rows=st.lists(st.integers(0, 9), min_size=1, max_size=12),
    dtype=st.sampled_from([d.torch_dtype for d in DTYPES]),
)
def test_property_round_trip(dp, cp, rows, dtype):
    store = __import__("torch_tgb.storage", fromlist=["MemoryStore"]).MemoryStore("prop-rt")
    slices = _grid(dp, cp, lambda d, c: {"v": _tensor(dtype, (rows[(d * cp + c) % len(rows)], 3), d * 7 + c), "w": torch.full((2,), d * 10 + c)})
    obj = write_tgb(store, "p.tgb", slices)
    footer = read_footer(store, "p.tgb", size=obj.size, footer_offset=obj.footer_offset, footer_length=obj.footer_length)
    for s in slices:
        _same(read_slice(store, "p.tgb", footer, footer.slice(s.dp, s.cp)), s.tensors)


def test_mmap_is_mmap(file_store):
    write_tgb(file_store, "k.tgb", [SliceData(0, 0, {"x": torch.arange(3)})])
    reader = SliceReader(file_store)
    footer = read_footer(file_store, "k.tgb")
    reader.read("k.tgb", footer, footer.slice(0, 0))
    assert isinstance(reader._maps["k.tgb"], mmap.mmap)
    reader.forget("k.tgb")
    assert "k.tgb" not in reader._maps


def test_write_errors(mem_store):
    from torch_tgb.errors import LayoutError, SchemaMismatch

    with pytest.raises(LayoutError):
        write_tgb(mem_store, "e.tgb", [])
    with pytest.raises(LayoutError, match="dp-major"):
        write_tgb(mem_store, "e.tgb", [SliceData(0, 1, {"x": torch.zeros(1)}), SliceData(0, 0, {"x": torch.zeros(1)})])
    with pytest.raises(SchemaMismatch, match="slice \\(dp=1, cp=0\\)"):
        write_tgb(mem_store, "e.tgb", [SliceData(0, 0, {"x": torch.zeros(1)}), SliceData(1, 0, {"y": torch.zeros(1)})])
    with pytest.raises(SchemaMismatch, match="torch.int8"):
        write_tgb(mem_store, "e.tgb", [SliceData(0, 0, {"x": torch.zeros(1)}), SliceData(1, 0, {"x": torch.zeros(1, dtype=torch.int8)})])
    with pytest.raises(SchemaMismatch, match="not supported"):
        write_tgb(mem_store, "e.tgb", [SliceData(0, 0, {"x": torch.zeros(1, dtype=torch.complex64)})])
    with pytest.raises(LayoutError, match="does not match"):
        write_tgb(mem_store, "e.tgb", [SliceData(0, 0, {"x": torch.zeros(1)})], layout=Layout(dp=2))
    assert not mem_store.exists("e.tgb")


def test_local_store_reads_by_mmap(tmp_path):
    from torch_tgb.storage import open_store

    store = open_store(str(tmp_path / "ns"))
    x = torch.arange(4096, dtype=torch.int64).reshape(8, 512)
    obj = write_tgb(store, "data/p/l.tgb", Layout(dp=2).cut({"x": x}), layout=Layout(dp=2))
    assert store.local_path(obj.key) is not None
    footer = read_footer(store, obj.key, size=obj.size, footer_offset=obj.footer_offset, footer_length=obj.footer_length)
    reader = SliceReader(store)
    part = reader.read(obj.key, footer, footer.slice(1, 0))["x"]
    assert torch.equal(part, x[4:])
    assert isinstance(reader._maps[obj.key], mmap.mmap)
    # and the plain function agrees
    assert torch.equal(read_slice(store, obj.key, footer, footer.slice(0, 0))["x"], x[:4])


def test_footer_check_against_layout_and_schema(mem_store):
    from torch_tgb.errors import SchemaMismatch
    from torch_tgb.format import schema_of

    layout = Layout(dp=2, seq_keys=("x",))
    batch = {"x": torch.zeros(4, 8, dtype=torch.int64), "w": torch.zeros(4)}
    write_tgb(mem_store, "c.tgb", layout.cut(batch), layout=layout, schema=schema_of(batch))
    footer = read_footer(mem_store, "c.tgb")
    footer.check(layout=layout, schema=schema_of(batch))
    footer.check(layout=layout.to_json())
    with pytest.raises(SchemaMismatch, match="dp=2 x cp=1"):
        footer.check(layout=Layout(dp=4))
    with pytest.raises(SchemaMismatch, match="written with layout"):
        footer.check(layout=Layout(dp=2, seq_keys=("w",)))
    with pytest.raises(SchemaMismatch, match="'w' is float32"):
        footer.check(schema={**schema_of(batch), "w": {"dtype": "float16", "shape": []}})
    with pytest.raises(SchemaMismatch, match="holds tensors"):
        footer.check(schema={"x": {"dtype": "int64", "shape": [8]}})
