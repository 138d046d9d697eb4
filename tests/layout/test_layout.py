"""Layout: cutting global batches, JSON round trip, schema and fingerprint."""

from __future__ import annotations

import pytest
import torch

from torch_tgb.errors import LayoutError, SchemaMismatch
from torch_tgb.format import check_schema, schema_fingerprint, schema_of
from torch_tgb.layout import Layout, cp_ranges


def _batch(b: int = 8, s: int = 16) -> dict[str, torch.Tensor]:
    ids = torch.arange(b * s).reshape(b, s)
    return {"input_ids": ids, "labels": ids + 1000, "weight": torch.arange(b, dtype=torch.float32)}


def test_defaults_and_json_round_trip():
    layout = Layout()
    assert (layout.dp, layout.cp, layout.seq_keys, layout.cp_order) == (1, 1, (), "contiguous")
    layout = Layout(dp=4, cp=2, seq_keys=["input_ids", "labels"], cp_order="zigzag")
    assert layout.seq_keys == ("input_ids", "labels")
    assert Layout.from_json(layout.to_json()) == layout
    assert layout.num_slices == 8 and layout.seq_chunks == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dp": 0},
        {"cp": -1},
        {"dp": 1.5},
        {"dp": True},
        {"seq_keys": "input_ids"},
        {"seq_keys": ("a", "a")},
        {"seq_keys": ("",)},
        {"cp_order": "random"},
    ],
)
def test_invalid_layouts(kwargs):
    with pytest.raises(LayoutError):
        Layout(**kwargs)


def test_from_json_rejects_garbage():
    with pytest.raises(LayoutError):
        Layout.from_json({"dp": 2, "bogus": 1})
    with pytest.raises(LayoutError):
        Layout.from_json([1, 2])  # type: ignore[arg-type]
    with pytest.raises(LayoutError):
        Layout.from_json({"dp": 2, "seq_keys": "abc"})


def test_cut_contiguous():
    batch = _batch()
    slices = Layout(dp=2, cp=2, seq_keys=("input_ids", "labels")).cut(batch)
    assert [(s.dp, s.cp) for s in slices] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    s = slices[3]
    assert torch.equal(s.tensors["input_ids"], batch["input_ids"][4:8, 8:16])
    assert torch.equal(s.tensors["labels"], batch["labels"][4:8, 8:16])
    # non-seq tensors are repeated in every cp slice
    assert torch.equal(slices[2].tensors["weight"], slices[3].tensors["weight"])
    assert torch.equal(s.tensors["weight"], batch["weight"][4:8])


def test_cut_zigzag():
    batch = _batch(b=2, s=8)
    slices = Layout(dp=1, cp=2, seq_keys=("input_ids",), cp_order="zigzag").cut(batch)
    # 4 chunks of 2 tokens: rank 0 gets chunks 0 and 3, rank 1 gets 1 and 2
    assert slices[0].tensors["input_ids"][0].tolist() == [0, 1, 6, 7]
    assert slices[1].tensors["input_ids"][0].tolist() == [2, 3, 4, 5]
    # labels are not a seq key here: repeated whole
    assert torch.equal(slices[1].tensors["labels"], batch["labels"])


def test_cut_union_is_the_batch():
    batch = _batch(b=12, s=24)
    for layout in (Layout(dp=3, cp=2, seq_keys=("input_ids",)), Layout(dp=2, cp=3, seq_keys=("input_ids",), cp_order="zigzag")):
        seen = torch.cat([s.tensors["input_ids"].reshape(-1) for s in layout.cut(batch)])
        assert sorted(seen.tolist()) == list(range(12 * 24))


@pytest.mark.parametrize(
    "layout,batch,match",
    [
        (Layout(dp=3), {"x": torch.zeros(8, 2)}, "not divisible by dp=3"),
        (Layout(cp=3, seq_keys=("x",)), {"x": torch.zeros(2, 8)}, "not divisible into 3 chunks"),
        (Layout(cp=2, seq_keys=("x",), cp_order="zigzag"), {"x": torch.zeros(2, 6)}, "4 chunks"),
        (Layout(seq_keys=("y",)), {"x": torch.zeros(2, 8)}, "'y' is not in the batch"),
        (Layout(cp=2, seq_keys=("x",)), {"x": torch.zeros(4)}, "sequence dim"),
        (Layout(), {"x": torch.zeros(4), "y": torch.zeros(3)}, "disagree"),
        (Layout(), {"x": torch.tensor(1.0)}, "0-dim"),
        (Layout(), {}, "non-empty"),
        (Layout(), {"x": [1, 2]}, "torch.Tensor"),
    ],
)
def test_cut_errors(layout, batch, match):
    with pytest.raises(LayoutError, match=match):
        layout.cut(batch)


def test_cp_ranges():
    assert cp_ranges(2, "contiguous") == [[(0, 0.5)], [(0.5, 1)]]
    z = cp_ranges(2, "zigzag")
    assert [[(float(a), float(b)) for a, b in r] for r in z] == [[(0, 0.25), (0.75, 1)], [(0.25, 0.5), (0.5, 0.75)]]
    assert cp_ranges(1, "zigzag") == [[(0, 1)]]
    with pytest.raises(LayoutError):
        cp_ranges(2, "diagonal")


def test_schema_of_and_check():
    batch = _batch()
    schema = schema_of(batch)
    assert schema == {
        "input_ids": {"dtype": "int64", "shape": [16]},
        "labels": {"dtype": "int64", "shape": [16]},
        "weight": {"dtype": "float32", "shape": []},
    }
    check_schema(schema, schema)
    check_schema(schema, {**schema, "input_ids": {"dtype": "int64", "shape": [-1]}})
    with pytest.raises(SchemaMismatch, match="'labels' has dtype int64, expected int32"):
        check_schema(schema, {**schema, "labels": {"dtype": "int32", "shape": [16]}}, where="ns")
    with pytest.raises(SchemaMismatch, match="trailing shape"):
        check_schema(schema, {**schema, "labels": {"dtype": "int64", "shape": [8]}})
    with pytest.raises(SchemaMismatch, match="do not match"):
        check_schema(schema, {"input_ids": schema["input_ids"]})
    with pytest.raises(SchemaMismatch):
        schema_of({"c": torch.zeros(2, dtype=torch.complex64)})


def test_fingerprint_is_stable_and_sensitive():
    layout = Layout(dp=2, seq_keys=("input_ids",))
    schema = schema_of(_batch())
    fp = schema_fingerprint(layout, schema)
    assert len(fp) == 64 and fp == schema_fingerprint(layout, dict(reversed(list(schema.items()))))
    assert fp == schema_fingerprint(Layout(dp=2, seq_keys=("input_ids",)), schema, {})
    assert fp != schema_fingerprint(Layout(dp=4, seq_keys=("input_ids",)), schema)
    assert fp != schema_fingerprint(layout, schema, {"tokenizer": "v2"})
    assert fp != schema_fingerprint(layout, {**schema, "weight": {"dtype": "float16", "shape": []}})
