"""Every footer held to its namespace's contract (dataset.json's layout and schema) at parse: ``format.Contract``.

A CRC-valid footer that disagrees with the namespace (a buggy or older
writer, a tampered object) is a ``CorruptObject`` naming the object, the
tensor and what the namespace says instead; every footer a real writer
writes passes (property-tested over layouts, cp orders, labels_from rows and
ragged keys). The consumer's read paths are exercised in
``tests/consumer/test_contract_checks.py``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.format._hostile import tgb_bytes
from torch_tgb.errors import CorruptObject, ManifestError, SchemaMismatch
from torch_tgb.format import Contract, encode_tgb, parse_footer, parse_footer_run, schema_of
from torch_tgb.layout import Layout

DENSE = {"x": torch.arange(16, dtype=torch.int32).reshape(4, 4), "y": torch.zeros(4, 3)}
DENSE_CONTRACT = Contract(Layout(dp=1), schema_of(DENSE))
RAGGED_ROWS = [torch.arange(n, dtype=torch.int8) for n in (2, 3, 1, 4)]
RAGGED = {"ids": torch.zeros(4, 4, dtype=torch.int32), "pix": RAGGED_ROWS}
RAGGED_CONTRACT = Contract(Layout(dp=1), schema_of(RAGGED))
PIX_OFFSETS = torch.tensor([0, 2, 5, 6, 10])


def parse(data: bytes, footer_offset: int, contract: Contract | None):
    return parse_footer(data[footer_offset:], key="obj", size=len(data), footer_offset=footer_offset,
                        contract=contract)


def judged(data: bytes, footer_offset: int, contract: Contract) -> None:
    """Parse under ``contract`` and build every slice (where the per-tensor checks run)."""
    parse(data, footer_offset, contract).slices()


HOSTILE = {
    # name: (tensors, ragged list, recorded schema (None: the stored dtypes), contract, versions, what the error names)
    "int16 [4, 8] in an int32 [4, 4] namespace": (
        {"x": torch.zeros(4, 8, dtype=torch.int16), "y": torch.zeros(4, 3)}, (), None, DENSE_CONTRACT, (None, None),
        r"'x' is int16"),
    "int16 [4, 8] under a footer that records int32": (
        {"x": torch.zeros(4, 8, dtype=torch.int16), "y": torch.zeros(4, 3)}, (), schema_of(DENSE), DENSE_CONTRACT,
        (None, None), r"'x' is stored as int16 \[4, 8\]; the namespace says int32 \[n, 4\]"),
    "[n, 3] as [3n, 1]": (
        {"x": DENSE["x"], "y": torch.zeros(12, 1)}, (), schema_of(DENSE), DENSE_CONTRACT, (None, None),
        r"'y' is stored as float32 \[12, 1\]; the namespace says float32 \[n, 3\]"),
    "dense rows that disagree": (
        {"x": DENSE["x"], "y": torch.zeros(8, 3)}, (), schema_of(DENSE), DENSE_CONTRACT, (None, None),
        r"'y' holds 8 rows and tensor 'x' 4"),
    "a tensor the namespace does not have": (
        {**DENSE, "z": torch.zeros(4)}, (), None, DENSE_CONTRACT, (None, None), r"holds tensors \['x', 'y', 'z'\]"),
    "ragged uint8 where the schema says int8": (
        {"ids": RAGGED["ids"], "pix": torch.zeros(10, dtype=torch.uint8), "pix_offsets": PIX_OFFSETS}, ("pix",),
        None, RAGGED_CONTRACT, (None, None), r"'pix' is uint8"),
    "ragged uint8 under a footer that records int8": (
        {"ids": RAGGED["ids"], "pix": torch.zeros(10, dtype=torch.uint8), "pix_offsets": PIX_OFFSETS}, ("pix",),
        schema_of(RAGGED), RAGGED_CONTRACT, (None, None), r"'pix' is stored as uint8 \[10\]; the namespace says int8"),
    "ragged list dropped: a version-1 footer": (
        {"ids": RAGGED["ids"], "pix": torch.zeros(10, dtype=torch.int8), "pix_offsets": torch.tensor([0, 3, 6, 9, 1010])},
        (), None, RAGGED_CONTRACT, (None, None), r"'pix' is stored dense .*ragged"),
    "ragged list dropped from a version-2 footer": (
        {"ids": RAGGED["ids"], "pix": torch.zeros(10, dtype=torch.int8), "pix_offsets": torch.tensor([0, 3, 6, 9, 1010])},
        (), None, RAGGED_CONTRACT, (2, 2), r"'pix' is stored dense .*ragged"),
    "offsets of another dtype": (
        {"ids": RAGGED["ids"], "pix": torch.zeros(10, dtype=torch.int8), "pix_offsets": PIX_OFFSETS.int()}, ("pix",),
        None, RAGGED_CONTRACT, (None, None), r"'pix_offsets' is stored as int32 \[5\]; the namespace says int64"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_footer_that_disagrees_with_the_namespace_is_corrupt(case: str) -> None:
    tensors, ragged, schema, contract, (header, trailer), match = HOSTILE[case]
    data, fo, _, _ = tgb_bytes(tensors, ragged=ragged, schema=schema, header_version=header, trailer_version=trailer)
    parse(data, fo, None).slices()  # valid on its own: only the namespace's contract tells
    with pytest.raises(CorruptObject, match=match) as info:
        judged(data, fo, contract)
    assert "object 'obj'" in str(info.value) and "namespace" in str(info.value)
    with pytest.raises(CorruptObject, match=match):  # the run parse judges its first footer alike
        parse_footer_run(data, [(fo, len(data))], key="obj", contract=contract).slice_run(0)


@pytest.mark.parametrize("versions", [(2, 1), (1, 2)], ids=["header 2, trailer 1", "header 1, trailer 2"])
def test_a_footer_whose_header_and_trailer_disagree_on_the_version_is_corrupt(versions) -> None:
    data, fo, _, _ = tgb_bytes(DENSE, header_version=versions[0], trailer_version=versions[1])
    with pytest.raises(CorruptObject, match=f"header says format version {versions[0]}, its trailer {versions[1]}"):
        parse(data, fo, None)


def test_the_grid_and_the_recorded_layout_are_held_to_the_namespace() -> None:
    batch = {"x": torch.zeros(4, 8, dtype=torch.int32)}
    buffers, obj = encode_tgb(Layout(dp=2).cut(batch), layout=Layout(dp=2))
    data = b"".join(bytes(b) for b in buffers)
    with pytest.raises(CorruptObject, match=r"holds dp=2 x cp=1 slices; the namespace's layout is dp=4 x cp=1"):
        parse(data, obj.footer_offset, Contract(Layout(dp=4), schema_of(batch)))
    with pytest.raises(CorruptObject, match=r"written with layout .*the namespace's layout is"):
        parse(data, obj.footer_offset, Contract(Layout(dp=2, seq_keys=("x",)), schema_of(batch)))
    parse(data, obj.footer_offset, Contract(Layout(dp=2).to_json(), schema_of(batch))).slices()


def test_footer_check_is_the_same_contract_as_schema_mismatch() -> None:
    """``Footer.check`` (for tools) says what the read path says, as SchemaMismatch, over every slice."""
    data, fo, _, _ = tgb_bytes({"x": torch.zeros(4, 8, dtype=torch.int16), "y": torch.zeros(4, 3)},
                            schema=schema_of(DENSE))
    footer = parse(data, fo, None)
    footer.check(layout=Layout(dp=1))
    with pytest.raises(SchemaMismatch, match=r"slice \(dp=0, cp=0\): tensor 'x' is stored as int16"):
        footer.check(layout=Layout(dp=1), schema=schema_of(DENSE))


@st.composite
def written(draw):
    """A layout and a global batch any writer may commit under it: (layout, batch, schema as dataset.json has it)."""
    cp = draw(st.sampled_from([1, 2, 4]))
    order = draw(st.sampled_from(["contiguous", "zigzag"]))
    efficient = draw(st.booleans())
    dp = draw(st.sampled_from([1, 2]))
    rows = dp * draw(st.integers(1, 3))
    chunks = cp * (2 if order == "zigzag" and cp > 1 else 1)
    seq = chunks * draw(st.integers(1, 3))
    ids = torch.arange(rows * (seq + efficient), dtype=torch.int32).reshape(rows, seq + efficient)
    batch: dict = {"input_ids": ids, "w": torch.zeros(rows, 2, dtype=torch.bfloat16)}
    keys: tuple[str, ...] = ("input_ids",)
    if not efficient and draw(st.booleans()):
        batch["labels"] = ids.long()
        keys = ("input_ids", "labels")
    if draw(st.booleans()):
        batch["seq_lens"] = [torch.ones(draw(st.integers(0, 3)), dtype=torch.int32) for _ in range(rows)]
    layout = Layout(dp=dp, cp=cp, seq_keys=keys, cp_order=order, labels_from="input_ids" if efficient else None)
    schema = schema_of(batch)
    if draw(st.booleans()):  # a declared schema: any sequence length
        schema["input_ids"]["shape"] = [-1]
    return layout, batch, schema


@settings(max_examples=120, deadline=None)
@given(case=written(), record=st.booleans())
def test_every_footer_a_writer_writes_passes_its_namespace_contract(case, record) -> None:
    """No false refusals: cp chunks (zig-zag, labels_from's extra token), ragged keys, -1 shapes, recorded or not."""
    layout, batch, schema = case
    buffers, obj = encode_tgb(layout.cut(batch), **({"layout": layout, "schema": schema_of(batch)} if record else {}))
    data = b"".join(bytes(b) for b in buffers)
    judged(data, obj.footer_offset, Contract(layout.to_json(), schema))


@pytest.mark.parametrize("spec", [5, {"dtype": "int32", "shape": "4"}, {"dtype": "int32", "shape": [4.5]}])
def test_a_malformed_schema_entry_is_a_manifest_error(spec) -> None:
    with pytest.raises(ManifestError, match=r"schema gives tensor 'x' as"):
        Contract(Layout(dp=1), {"x": spec})
