"""parse_footer_run: a run of a segment's footers read as one table gives what parse_footer gives for each.

The run path of a local reader (datapipes.read.local_runs) trusts these footers
without a full parse each, so the property is strict: for any segment (TGBs
of different shapes, grids and metadata mixed in any order) and any single
corrupted byte in any footer or trailer, chaining runs over the segment gives
the same verdict as parsing every footer in full: the same slices, or a
CorruptObject.
"""

from __future__ import annotations

import mmap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_tgb.errors import CorruptObject
from torch_tgb.format import SLICE_ALIGN, SliceData, encode_tgb, parse_footer, parse_footer_run

# a few TGB "kinds": consecutive TGBs of one kind are shifted copies; another kind starts a new run
KINDS = [
    {"rows": 2, "cols": 8, "dp": 1, "cp": 1, "meta": {}},
    {"rows": 2, "cols": 8, "dp": 2, "cp": 1, "meta": {}},
    {"rows": 2, "cols": 8, "dp": 1, "cp": 1, "meta": {"mix": "a"}},
    {"rows": 3, "cols": 5, "dp": 1, "cp": 2, "meta": {}},
    {"rows": 8, "cols": 2, "dp": 1, "cp": 1, "meta": {}},  # kind 0's header and meta, other tables
]


def _slices(kind: dict, seed: int) -> list[SliceData]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for dp in range(kind["dp"]):
        for cp in range(kind["cp"]):
            ids = torch.randint(0, 1 << 20, (kind["rows"], kind["cols"]), generator=g, dtype=torch.int32)
            out.append(SliceData(dp, cp, {"input_ids": ids, "w": torch.rand(kind["rows"], generator=g)}))
    return out


def segment(kinds: list[int], gaps: list[int]) -> tuple[bytearray, list[tuple[int, int]]]:
    """A segment object of TGBs of the given kinds; ``gaps`` adds whole pages between TGBs (uneven spacing)."""
    data = bytearray()
    tgbs = []
    for i, k in enumerate(kinds):
        base = len(data) + (-len(data) % SLICE_ALIGN) + gaps[i] * SLICE_ALIGN
        buffers, obj = encode_tgb(_slices(KINDS[k], i), metadata=KINDS[k]["meta"], base=base)
        data += bytes(base - len(data))
        for b in buffers:
            data += b
        tgbs.append((obj.footer_offset, obj.size))
    return data, tgbs


def full(buffer, tgbs, key="seg") -> list[list]:
    """Every slice of every TGB, by parse_footer."""
    out = []
    for fo, size in tgbs:
        f = parse_footer(bytes(buffer[fo:size]), key=key, size=size, footer_offset=fo)
        out.append(f.slices())
    return out


def chained(buffer, tgbs, key="seg") -> tuple[list[list], list[int]]:
    """Every slice of every TGB, by chaining parse_footer_run; and the run lengths."""
    out, lengths, i = [], [], 0
    while i < len(tgbs):
        run = parse_footer_run(buffer, tgbs[i:], key=key)
        assert len(run) >= 1
        for j in range(len(run)):
            f = run.first
            out.append([run.slice(j, s.dp, s.cp) for s in f.slices()])
            assert run.footer(j).slices() == out[-1]
        lengths.append(len(run))
        i += len(run)
    return out, lengths


segments = st.lists(st.integers(0, len(KINDS) - 1), min_size=1, max_size=8).flatmap(
    lambda kinds: st.tuples(st.just(kinds), st.lists(st.integers(0, 2), min_size=len(kinds), max_size=len(kinds)))
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments)
def test_a_run_parse_equals_the_full_parse_of_every_footer(spec) -> None:
    kinds, gaps = spec
    data, tgbs = segment(kinds, gaps)
    got, lengths = chained(bytes(data), tgbs)
    assert got == full(data, tgbs)
    # a run never crosses a change of kind: each run is one kind, maximal
    i = 0
    for n in lengths:
        assert len(set(kinds[i : i + n])) == 1
        assert i + n == len(kinds) or kinds[i + n] != kinds[i]
        i += n


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segments, st.data())
def test_any_corrupt_footer_byte_gets_the_full_parse_verdict(spec, data) -> None:
    kinds, gaps = spec
    buffer, tgbs = segment(kinds, gaps)
    victim = data.draw(st.integers(0, len(tgbs) - 1))
    fo, size = tgbs[victim]
    at = data.draw(st.integers(fo, size - 1))
    buffer[at] ^= data.draw(st.integers(1, 255))
    try:
        expected = full(buffer, tgbs)
    except CorruptObject:
        expected = None
    try:
        got = chained(bytes(buffer), tgbs)[0]
    except CorruptObject:
        got = None
    assert got == expected


def _verdict(buffer, tgbs, how):
    try:
        return how(buffer, tgbs)
    except CorruptObject:
        return None


def test_every_single_byte_corruption_inside_a_run_gets_the_full_parse_verdict() -> None:
    """Exhaustive over one footer in the middle of a run: tables, CRC fields, trailer, every byte."""
    clean, tgbs = segment([0] * 4, [0] * 4)
    fo, size = tgbs[2]
    refused = 0
    for at in range(fo, size):
        for flip in (0x01, 0x80):
            buffer = bytearray(clean)
            buffer[at] ^= flip
            expected = _verdict(buffer, tgbs, full)
            refused += expected is None
            assert _verdict(bytes(buffer), tgbs, lambda b, t: chained(b, t)[0]) == expected, (at, flip)
    assert refused == 2 * (size - fo)  # the footer CRC covers every byte: each flip is refused


def test_a_mapped_segment_and_a_bytearray_read_alike(tmp_path) -> None:
    data, tgbs = segment([0] * 6, [0] * 6)
    path = tmp_path / "seg"
    path.write_bytes(bytes(data))
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    run_mapped = parse_footer_run(mapped, tgbs, key="seg")
    run_array = parse_footer_run(data, tgbs, key="seg")  # a small object read whole is a bytearray
    assert len(run_mapped) == len(run_array) == 6
    assert [run_mapped.slice(i, 0) for i in range(6)] == [run_array.slice(i, 0) for i in range(6)]


def test_entries_that_do_not_lie_as_shifted_copies_end_the_run() -> None:
    data, tgbs = segment([0] * 4, [0] * 4)
    # an entry claiming the same footer again (no shift), or one past the buffer: never part of the run
    assert len(parse_footer_run(data, [tgbs[0], tgbs[0], *tgbs[1:]], key="seg")) == 1
    past = (tgbs[1][0] + len(data), tgbs[1][1] + len(data))
    assert len(parse_footer_run(data, [tgbs[0], past], key="seg")) == 1
    with pytest.raises(CorruptObject, match="truncated"):
        parse_footer_run(data[: tgbs[0][1] - 1], tgbs, key="seg")
