"""No read path delivers a TGB that disagrees with its namespace's contract (issue 40, "Wrong data delivered today").

A namespace is written by a real producer; then one TGB (step 2 of 4) is
replaced, by hand, with a CRC-valid hostile one (``tests/format/_hostile.py``)
and its manifest entry pointed at it. Every read path must deliver steps 0
and 1, then refuse step 2 with a ``CorruptObject`` that names the namespace,
the step, the object and what the namespace says instead: mapped runs, the
step pipeline, copy reads, remote range reads (footers read in place, or from
a segment's index; steps 1-3 fetched as one batched read) and the hot tier.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.format._hostile import tgb_bytes
from torch_tgb import Layout, Mesh, Producer, TGBDataset
from torch_tgb.errors import CorruptObject
from torch_tgb.format import SLICE_ALIGN, encode_tgb, schema_of, segment_index
from torch_tgb.producer import ProducerConfig
from torch_tgb.storage import ForwardingStore, LocalStore
from torch_tgb.testing.version_json import entry_count, get_entry, get_entry_field, set_entry

LAYOUT = Layout(dp=1)
STEPS = 4
BAD_STEP = 2
#: one TGB of an object: (base, object key) -> (its bytes [base, size), footer_offset, footer_length, record width)
Encoder = Callable[[int, str], tuple[bytes, int, int, int]]


def dense(step: int) -> dict[str, Any]:
    return {"x": torch.arange(16, dtype=torch.int32).reshape(4, 4) + 100 * step, "y": torch.full((4, 3), float(step))}


def ragged(step: int) -> dict[str, Any]:
    return {"ids": torch.full((4, 4), step, dtype=torch.int32),
            "pix": [torch.full((n,), step, dtype=torch.int8) for n in (2, 3, 1, 4)]}


BAD_OFFSETS = torch.tensor([0, 3, 6, 9, 1010])  # over 10 values: a row that reads past them
HOSTILE: dict[str, tuple[Callable[[int], dict[str, Any]], dict[str, Any], str]] = {
    # name: (the namespace's batches, tgb_bytes arguments of the hostile step, what the error names)
    "int16 [4, 8] in an int32 [4, 4] namespace": (
        dense, {"tensors": {"x": torch.zeros(4, 8, dtype=torch.int16), "y": torch.zeros(4, 3)}}, "'x' is int16"),
    "int16 [4, 8] under a footer recording int32": (  # passes at parse, refused when its slice is first built
        dense, {"tensors": {"x": torch.zeros(4, 8, dtype=torch.int16), "y": torch.zeros(4, 3)},
                "schema": {"x": {"dtype": "int32"}, "y": {"dtype": "float32"}}}, "'x' is stored as int16 [4, 8]"),
    "[n, 3] as [3n, 1]": (
        dense, {"tensors": {"x": dense(BAD_STEP)["x"], "y": torch.zeros(12, 1)}}, "'y' is stored as float32 [12, 1]"),
    "ragged uint8 where the schema says int8": (
        ragged, {"tensors": {"ids": torch.zeros(4, 4, dtype=torch.int32), "pix": torch.zeros(10, dtype=torch.uint8),
                             "pix_offsets": torch.tensor([0, 2, 5, 6, 10])}, "ragged": ("pix",)}, "'pix' is uint8"),
    "ragged list dropped (footer version 1)": (
        ragged, {"tensors": {"ids": torch.zeros(4, 4, dtype=torch.int32), "pix": torch.zeros(10, dtype=torch.int8),
                             "pix_offsets": BAD_OFFSETS}}, "'pix' is stored dense"),
    "ragged list dropped (footer version 2)": (
        ragged, {"tensors": {"ids": torch.zeros(4, 4, dtype=torch.int32), "pix": torch.zeros(10, dtype=torch.int8),
                             "pix_offsets": BAD_OFFSETS}, "header_version": 2, "trailer_version": 2},
        "'pix' is stored dense"),
    "header version 2, trailer version 1": (
        dense, {"tensors": dense(BAD_STEP), "header_version": 2}, "header says format version 2, its trailer 1"),
    # version 3: the same lies in slice records, which a remote reader reads alone (format/_records.py)
    "int16 [4, 8] in an int32 [4, 4] namespace (records)": (
        dense, {"tensors": {"x": torch.zeros(4, 8, dtype=torch.int16), "y": torch.zeros(4, 3)}, "records": True},
        "'x' is int16"),
    "int16 [4, 8] under a footer recording int32 (records)": (
        dense, {"tensors": {"x": torch.zeros(4, 8, dtype=torch.int16), "y": torch.zeros(4, 3)},
                "schema": {"x": {"dtype": "int32"}, "y": {"dtype": "float32"}}, "records": True},
        "'x' is stored as int16 [4, 8]"),
    "ragged uint8 where the schema says int8 (records)": (
        ragged, {"tensors": {"ids": torch.zeros(4, 4, dtype=torch.int32), "pix": torch.zeros(10, dtype=torch.uint8),
                             "pix_offsets": torch.tensor([0, 2, 5, 6, 10])}, "ragged": ("pix",), "records": True},
        "'pix' is uint8"),
}


class Remote(ForwardingStore):
    """A local namespace read as a remote one: no local paths, so every read is a range read."""

    def local_path(self, key: str) -> str | None:
        return None


READS: dict[str, Callable[[str, Path], tuple[Any, dict[str, Any]]]] = {
    "mapped runs": lambda ns, tmp: (ns, {}),
    "step pipeline": lambda ns, tmp: (ns, {"runs": False}),
    "copy reads": lambda ns, tmp: (ns, {"read_mode": "copy"}),
    "remote range reads": lambda ns, tmp: (Remote(LocalStore(ns)), {"prefetch": 3}),
    "hot tier": lambda ns, tmp: (Remote(LocalStore(ns)), {"cache_dir": str(tmp / "cache"), "prefetch": 0}),
}


def produce(ns: str, batches: Callable[[int], dict[str, Any]], *, segment: bool) -> None:
    config = ProducerConfig(segment_tgbs=STEPS if segment else 1)
    with Producer(ns, producer_id="p", layout=LAYOUT, commit_policy="naive", config=config) as p:
        for step in range(STEPS):
            p.append(batches(step), offset=step)
        p.close(seal=True)


def valid(batch: dict[str, Any]) -> Encoder:
    """What the producer writes for ``batch`` at a base."""
    def encode(base: int, key: str) -> tuple[bytes, int, int, int]:
        buffers, obj = encode_tgb(LAYOUT.cut(batch), base=base, key=key)
        return b"".join(bytes(b) for b in buffers), obj.footer_offset, obj.footer_length, obj.slice_record
    return encode


def rewrite(root: Path, tgbs: list[Encoder], *, segment: bool) -> None:
    """Step ``i`` of the namespace at ``root`` becomes ``tgbs[i]``: its object rewritten, its manifest entry too."""
    entries = {}
    for path in sorted((root / "_tgb" / "log").rglob("*.json")):  # spread keys: under 16 prefix directories
        version = json.loads(path.read_bytes())
        for i in range(entry_count(version)):
            entries[get_entry_field(version, i, "offset")] = (path, version, i)
    placed: list[tuple[int, int, int, int, int]] = []  # (start, size, footer_offset, footer_length, width) a step
    if segment:
        data = bytearray()
        segment_key = get_entry_field(entries[0][1], entries[0][2], "key")
        for encode in tgbs:
            data += bytes(-len(data) % SLICE_ALIGN)
            base = len(data)
            blob, fo, fl, width = encode(base, segment_key)
            data += blob
            placed.append((base, len(data), fo, fl, width))
        data += segment_index([(fo, size) for _, size, fo, _, _ in placed],
                              [bytes(data[fo:size]) for _, size, fo, _, _ in placed])
        keys = {get_entry_field(version, i, "key") for _, version, i in entries.values()}
        assert len(keys) == 1, keys  # one segment object holds every step
        (root / keys.pop()).write_bytes(bytes(data))
    for step, encode in enumerate(tgbs):
        path, version, i = entries[step]
        entry = get_entry(version, i)
        if segment:
            start, size, fo, fl, width = placed[step]
            entry.update(object_size=len(data), size=size, footer_offset=fo, footer_length=fl, start=start,
                         slice_record=width)
        else:
            blob, fo, fl, width = encode(0, entry["key"])
            (root / entry["key"]).write_bytes(blob)
            entry.update(size=len(blob), footer_offset=fo, footer_length=fl, slice_record=width)
        set_entry(version, i, entry)
        path.write_text(json.dumps(version))


@pytest.mark.parametrize("segment", [False, True], ids=["one TGB per object", "segment"])
@pytest.mark.parametrize("how", READS)
@pytest.mark.parametrize("case", HOSTILE)
def test_a_tgb_that_disagrees_with_the_namespace_is_refused_on_every_read_path(tmp_path, case, how, segment,
                                                                              monkeypatch) -> None:
    batches, hostile, names = HOSTILE[case]
    if hostile.get("records"):  # a rank reads its slice records alone, however small the footer
        from torch_tgb.datapipes.read import footer_index

        monkeypatch.setattr(footer_index, "RECORDS_FROM", 0)
    root = tmp_path / "ns"
    produce(str(root), batches, segment=segment)
    tgbs = [valid(batches(step)) for step in range(STEPS)]
    tgbs[BAD_STEP] = lambda base, key: tgb_bytes(base=base, key=key, **hostile)
    rewrite(root, tgbs, segment=segment)
    ns, options = READS[how](str(root), tmp_path)
    it = iter(TGBDataset(ns, mesh=Mesh(0, 1), **options))
    for step in range(BAD_STEP):  # the steps before the hostile one are delivered, as written
        got = next(it)
        for name, tensor in LAYOUT.cut(batches(step))[0].tensors.items():
            assert torch.equal(got[name], tensor), (step, name)
    with pytest.raises(CorruptObject) as info:
        next(it)
    message = str(info.value)
    assert names in message and f"step={BAD_STEP}" in message, message
    assert "the namespace" in message or case.startswith("header"), message  # what the namespace says instead
    assert str(root) in message and "data/p/" in message, message  # the namespace and the object


def test_the_contract_costs_one_check_per_footer_and_slice(tmp_path, monkeypatch) -> None:
    """Judged once per distinct object and slice (cached with the parsed footer), not once per read."""
    from torch_tgb.format import Contract

    calls = {"footer": 0, "slice": 0}
    footer_problem, slice_problem = Contract.footer_problem, Contract.slice_problem

    def counted_footer(self, footer):
        calls["footer"] += 1
        return footer_problem(self, footer)

    def counted_slice(self, cp, tensors):
        calls["slice"] += 1
        return slice_problem(self, cp, tensors)

    monkeypatch.setattr(Contract, "footer_problem", counted_footer)
    monkeypatch.setattr(Contract, "slice_problem", counted_slice)
    root = tmp_path / "ns"
    produce(str(root), dense, segment=True)
    ds = TGBDataset(str(root), mesh=Mesh(0, 1), epochs=4)  # four passes over the same three TGBs
    assert len(list(ds)) == 4 * STEPS
    assert 1 <= calls["footer"] <= 4 * STEPS and calls["slice"] == calls["footer"]  # at most once per parse
    calls.update(footer=0, slice=0)
    assert len(list(TGBDataset(str(root), mesh=Mesh(0, 1), runs=False, epochs=4))) == 4 * STEPS
    assert calls["footer"] == calls["slice"] == STEPS  # the step path caches each parsed footer: one check each
