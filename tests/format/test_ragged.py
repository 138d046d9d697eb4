"""Ragged keys in the TGB format: layout, version, hostile offsets, schema, tools."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tgb.format._footer as footer_module
from torch_tgb import Layout, Mesh, Producer, TGBDataset
from torch_tgb.errors import CorruptObject, LayoutError, SchemaMismatch
from torch_tgb.format import FORMAT_VERSION, SliceReader, encode_tgb, parse_footer, read_footer
from torch_tgb.layout import SliceData, check_offsets, ragged_part
from torch_tgb.storage import MemoryStore


def write(store: MemoryStore, key: str, slices: list[SliceData], format_version: int = FORMAT_VERSION) -> None:
    buffers, _ = encode_tgb(slices, format_version=format_version)
    store.put(key, b"".join(bytes(b) for b in buffers))


def ragged_slice(values: torch.Tensor, offsets: torch.Tensor, rows: int | None = None) -> SliceData:
    tensors = {"pix": values, "pix_offsets": offsets}
    if rows is not None:
        tensors["sid"] = torch.arange(rows)
    return SliceData(0, 0, tensors, ("pix",))


@pytest.mark.parametrize("written", [FORMAT_VERSION, 2])
def test_ragged_objects_are_version_2_or_3_and_dense_ones_stay_version_1_for_older_readers(written) -> None:
    store = MemoryStore("ragged-version")
    layout = Layout(dp=2)
    batch = {"sid": torch.arange(4), "pix": [torch.ones(n, 2, dtype=torch.uint8) for n in (0, 1, 2, 3)]}
    buffers, obj = encode_tgb(layout.cut(batch), layout=layout, format_version=written)
    data = b"".join(bytes(b) for b in buffers)
    footer = parse_footer(data[obj.footer_offset :], key="k", size=obj.size, footer_offset=obj.footer_offset)
    assert footer.ragged == ("pix",) and int.from_bytes(data[-12:-8], "little") == written
    assert [footer.slice(d).ragged for d in range(2)] == [("pix",), ("pix",)]
    dense, dobj = encode_tgb(layout.cut({"sid": torch.arange(4)}), layout=layout, format_version=written)
    assert int.from_bytes(b"".join(bytes(b) for b in dense)[-12:-8], "little") == (1 if written == 2 else written)
    store.close()


def test_an_older_reader_refuses_a_ragged_object_naming_the_version(monkeypatch) -> None:
    """A reader that knows version 1 only (what torch_tgb before ragged keys was) refuses, and says why."""
    store = MemoryStore("ragged-old-reader")
    write(store, "o", [ragged_slice(torch.ones(3, 2), torch.tensor([0, 1, 3]), rows=2)], format_version=2)
    monkeypatch.setattr(footer_module, "FORMAT_VERSIONS", (1,))
    with pytest.raises(CorruptObject, match="unknown TGB format version 2.*newer torch_tgb"):
        read_footer(store, "o")
    write(store, "p", [ragged_slice(torch.ones(3, 2), torch.tensor([0, 1, 3]), rows=2)])
    monkeypatch.setattr(footer_module, "FORMAT_VERSIONS", (1, 2))  # a reader of round 3
    with pytest.raises(CorruptObject, match="unknown TGB format version 3.*newer torch_tgb"):
        read_footer(store, "p")
    store.close()


HOSTILE = {
    "decreasing": [0, 3, 1],
    "past the values": [0, 2, 9],
    "absurd": [0, 2**62, 4],
    "not from 0": [1, 2, 4],
    "short of the values": [0, 1, 2],
    "more rows than the batch": [0, 1, 2, 3, 4],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_offsets_are_a_corrupt_object(case: str) -> None:
    """Offsets written so (the CRC matches) but wrong: a typed error naming object, slice and key, never a view."""
    store = MemoryStore(f"ragged-hostile-{len(case)}")
    write(store, "o", [ragged_slice(torch.arange(8, dtype=torch.uint8).reshape(4, 2), torch.tensor(HOSTILE[case]), rows=2)])
    footer = read_footer(store, "o")
    with pytest.raises(CorruptObject, match=r"object 'o', slice \(dp=0, cp=0\), ragged key 'pix'"):
        SliceReader(store).read("o", footer, footer.slice(0))
    store.close()


def test_offsets_of_another_dtype_are_corrupt() -> None:
    store = MemoryStore("ragged-dtype")
    write(store, "o", [ragged_slice(torch.ones(2, 2), torch.tensor([0, 1, 2], dtype=torch.int32), rows=2)])
    footer = read_footer(store, "o")
    with pytest.raises(CorruptObject, match="int64 offsets"):
        SliceReader(store).read("o", footer, footer.slice(0))
    store.close()


@settings(max_examples=200, deadline=None)
@given(offsets=st.lists(st.integers(-5, 12), min_size=0, max_size=7), items=st.integers(0, 10),
       rows=st.one_of(st.none(), st.integers(0, 6)))
def test_check_offsets_accepts_exactly_the_well_formed(offsets, items, rows) -> None:
    """Any int64 offsets: accepted iff from 0, non-decreasing, ending at the items, one per row plus one."""
    arr = np.asarray(offsets, dtype=np.int64)
    good = (len(arr) >= 1 and arr[0] == 0 and bool((np.diff(arr) >= 0).all()) and arr[-1] == items
            and (rows is None or len(arr) == rows + 1))
    assert (check_offsets(items, arr, rows) is None) == good


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=9))
def test_ragged_part_round_trips_any_row_lengths(lengths) -> None:
    rows = [torch.randint(0, 255, (n, 3), dtype=torch.uint8) for n in lengths]
    values, offsets = ragged_part(rows)
    assert offsets.tolist() == [0, *np.cumsum(lengths).tolist()]
    assert all(torch.equal(values[offsets[r] : offsets[r + 1]], rows[r]) for r in range(len(rows)))


def test_layout_refuses_malformed_ragged_batches() -> None:
    layout = Layout(dp=1, seq_keys=("input_ids",))
    ids = torch.zeros(2, 4, dtype=torch.int64)
    with pytest.raises(LayoutError, match="cannot be a seq key"):
        layout.check_batch({"input_ids": [torch.zeros(3), torch.zeros(1)]})
    with pytest.raises(LayoutError, match="same dtype and trailing dims"):
        layout.check_batch({"input_ids": ids, "pix": [torch.zeros(1, 3), torch.zeros(1, 4)]})
    with pytest.raises(LayoutError, match="same dtype and trailing dims"):
        layout.check_batch({"input_ids": ids, "pix": [torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.uint8)]})
    with pytest.raises(LayoutError, match="0-dim"):
        layout.check_batch({"input_ids": ids, "pix": [torch.zeros(1), torch.tensor(3.0)]})
    with pytest.raises(LayoutError, match="name of its offsets"):
        layout.check_batch({"input_ids": ids, "pix": [torch.zeros(1), torch.zeros(2)], "pix_offsets": ids})
    with pytest.raises(LayoutError, match="disagree on the global batch size"):
        layout.check_batch({"input_ids": ids, "pix": [torch.zeros(1)]})
    with pytest.raises(LayoutError, match="list of one tensor per row"):
        layout.check_batch({"input_ids": ids, "pix": np.zeros(2)})


def test_a_key_cannot_change_from_dense_to_ragged_in_a_namespace(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    with Producer(ns, producer_id="p", layout=Layout(dp=1)) as p:
        p.append({"pix": [torch.zeros(1, 2), torch.zeros(0, 2)]}, offset=0)
        with pytest.raises(SchemaMismatch, match="'pix' is dense, the namespace schema has it ragged"):
            p.append({"pix": torch.zeros(2, 1, 2)}, offset=1)
        p.close(seal=True)
    info = json.loads((tmp_path / "ns" / "_tgb" / "dataset.json").read_text())
    assert info["schema"]["pix"] == {"dtype": "float32", "shape": [2], "ragged": True}


def test_verify_and_inspect_know_ragged_keys(tmp_path, capsys) -> None:
    from torch_tgb.cli.main import main

    ns = str(tmp_path / "ns")
    with Producer(ns, producer_id="p", layout=Layout(dp=2)) as p:
        for step in range(3):
            p.append({"sid": torch.arange(4), "pix": [torch.full((n, 3), n, dtype=torch.uint8) for n in (0, 2, 1, 4)]},
                     offset=step)
        p.close(seal=True)
    assert main(["verify", ns]) == 0
    assert main(["inspect", ns]) == 0
    out = capsys.readouterr().out
    assert "pix:uint8 [n,3] per row, ragged" in out
    b = next(iter(TGBDataset(ns, mesh=Mesh(1, 2))))
    assert b["pix_offsets"].tolist() == [0, 1, 5]
