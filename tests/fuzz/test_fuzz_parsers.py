"""Hypothesis fuzzing of every parser of untrusted bytes.

Targets: the TGB footer/trailer (``parse_footer``, ``read_footer`` and slice
decoding), a segment's run of footers (``parse_footer_run``) and its index
(``parse_index_trailer``, ``SegmentIndex``), manifest versions, snapshots, GC boundary, ``dataset.json``
(+ ``Layout.from_json``), watermarks, and the LLMBATCH header. Inputs are
random bytes and mutations of valid objects (bit flips, overwritten fields,
truncation, splices). Properties: only ``TGBError`` subclasses escape; no
allocation much larger than the input (tracemalloc peak); no hang
(pytest-timeout, and hypothesis' per-example deadline).
"""

from __future__ import annotations

import json
import struct
import tracemalloc

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_tgb.errors import TGBError
from torch_tgb.format import SliceData, encode_tgb, read_footer
from torch_tgb.format._footer import TRAILER_SIZE, parse_footer, parse_trailer
from torch_tgb.format._reader import decode_slice
from torch_tgb.format.llmbatch import HEADER_SIZE, LLMBatchHeader
from torch_tgb.layout import Layout
from torch_tgb.manifest.records import DatasetInfo, GCBoundary, ManifestState, Version
from torch_tgb.storage import MemoryStore

pytestmark = pytest.mark.timeout(300)

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _tgb_bytes(dp: int = 2, cp: int = 1) -> bytes:
    layout = Layout(dp=dp, cp=cp, seq_keys=("ids",))
    batch = {"ids": torch.arange(4 * 8, dtype=torch.int32).reshape(4, 8), "w": torch.ones(4, 3, dtype=torch.bfloat16)}
    buffers, _ = encode_tgb(layout.cut(batch), layout=layout.to_json(), schema={}, metadata={"m": 1})
    return b"".join(bytes(b) for b in buffers)


VALID = _tgb_bytes()


@st.composite
def mutated(draw, valid: bytes, region_start: int = 0) -> bytes:
    """``valid`` with a few random edits biased towards ``[region_start, end)``."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "word", "truncate", "splice", "extend"]))
        lo = draw(st.sampled_from([0, region_start, max(0, len(data) - TRAILER_SIZE)]))
        if not data:
            break
        pos = draw(st.integers(min(lo, len(data) - 1), len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "word":
            value = draw(st.sampled_from([0, 1, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1, 4096, 10**12]))
            word = value.to_bytes(8, "little")
            data[pos : pos + 8] = word[: len(data[pos : pos + 8])]
        elif kind == "truncate":
            if draw(st.booleans()):
                del data[pos:]
            else:
                del data[:pos]
        elif kind == "splice":
            data[pos:pos] = draw(st.binary(max_size=64))
        else:
            data += draw(st.binary(max_size=64))
    return bytes(data)


def _bounded(fn, limit: int) -> None:
    """Run ``fn``; only TGBError may escape; peak allocation stays under ``limit`` bytes."""
    tracemalloc.start()
    try:
        fn()
    except TGBError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak <= limit, f"allocated {peak} bytes parsing an input of at most {limit // 8} bytes"


def _read_all(data: bytes) -> None:
    store = MemoryStore("fuzz")
    store.put("data/x.tgb", data)
    footer = read_footer(store, "data/x.tgb")
    for info in footer.slices():
        decode_slice(data, info, base_offset=0, verify=True, key="data/x.tgb")


def _footer_region(data: bytes) -> int:
    try:
        return parse_trailer(data[-TRAILER_SIZE:], key="k", size=len(data))[0]
    except TGBError:
        return 0


@FUZZ
@given(data=mutated(VALID, _footer_region(VALID)))
def test_fuzz_tgb_object(data: bytes) -> None:
    _bounded(lambda: _read_all(data), 8 * len(VALID) + (1 << 20))


@FUZZ
@given(data=st.binary(max_size=2048))
def test_fuzz_footer_random_bytes(data: bytes) -> None:
    _bounded(lambda: parse_footer(data, key="k", size=len(data), footer_offset=0), 8 * len(data) + (1 << 20))
    _bounded(lambda: _read_all(data), 8 * len(data) + (1 << 20))


@FUZZ
@given(
    fields=st.tuples(
        st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)
    ),
    body=st.binary(min_size=32, max_size=512),
)
def test_fuzz_footer_header_fields(fields: tuple[int, int, int], body: bytes) -> None:
    """A self-consistent trailer (right magic, right CRC) in front of a hostile footer body."""
    from torch_tgb.format._footer import TRAILER_MAGIC, crc32c_of

    length, _crc, _ = fields
    trailer = struct.pack("<QII8s", len(body), crc32c_of(body), 1, TRAILER_MAGIC)
    data = body + trailer
    _bounded(lambda: parse_footer(data, key="k", size=len(data), footer_offset=0), 8 * len(data) + (1 << 20))
    bad = body + struct.pack("<QII8s", length, crc32c_of(body), 1, TRAILER_MAGIC)
    _bounded(lambda: _read_all(bad), 8 * len(bad) + (1 << 20))


# --- segments: a run of footers, the segment index --------------------------------


def _segment_bytes(n: int = 4) -> tuple[bytes, list[tuple[int, int]]]:
    from torch_tgb.format import SLICE_ALIGN, encode_segment_index

    data = bytearray()
    tgbs = []
    for i in range(n):
        base = len(data) + (-len(data) % SLICE_ALIGN)
        buffers, obj = encode_tgb([SliceData(0, 0, {"ids": torch.arange(16, dtype=torch.int32) + i})], base=base)
        data += bytes(base - len(data))
        for b in buffers:
            data += b
        tgbs.append((obj.footer_offset, obj.size))
    return bytes(data) + encode_segment_index(data, tgbs), tgbs


SEGMENT, SEGMENT_TGBS = _segment_bytes()


def _read_segment(data: bytes) -> None:
    from torch_tgb.format import INDEX_TRAILER_SIZE, SegmentIndex, parse_footer_run, parse_index_trailer

    found = parse_index_trailer(data[-INDEX_TRAILER_SIZE:], key="seg", object_size=len(data))
    if found is not None:
        index = SegmentIndex(data[max(0, found[0]) :], key="seg", object_size=len(data))
        for fo, size in SEGMENT_TGBS:
            index.footer(fo, size)
    i = 0
    while i < len(SEGMENT_TGBS):
        run = parse_footer_run(data, SEGMENT_TGBS[i:], key="seg")
        for j in range(len(run)):
            run.slice(j, 0, 0)
        i += len(run)


@FUZZ
@given(data=mutated(SEGMENT, SEGMENT_TGBS[0][0]))
def test_fuzz_segment_footers_and_index(data: bytes) -> None:
    _bounded(lambda: _read_segment(data), 8 * len(SEGMENT) + (1 << 20))


# --- manifest JSON ------------------------------------------------------------

VERSION = Version(
    3, "0123456789abcdef", 7,
    (),
    {},
).to_json()
VERSION["entries"] = [
    {"key": "data/p0/a.tgb", "size": 9000, "footer_offset": 8192, "footer_length": 200, "producer": "p0",
     "offset": 4, "samples": 2, "tokens": 16}
]
VERSION["producers"] = {"p0": {"epoch": 2, "next_offset": 5, "committed_at": 1.5}}
VALID_VERSION = json.dumps(VERSION).encode()
assert Version.decode(VALID_VERSION, number=3).stop_step == 8

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


@st.composite
def mutated_json(draw, base: dict) -> bytes:
    """``base`` with random fields replaced, removed or added (valid JSON, hostile content)."""
    obj = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 4))):
        target = obj
        if draw(st.booleans()) and isinstance(obj.get("entries"), list) and obj["entries"]:
            target = obj["entries"][0]
        if not isinstance(target, dict) or not target:
            break
        name = draw(st.sampled_from(sorted(target)))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            target[name] = draw(json_values)
        elif action == "delete":
            del target[name]
        else:
            target[draw(st.text(max_size=8))] = draw(json_values)
    return json.dumps(obj).encode()


PARSERS = {
    "version": lambda b: Version.decode(b, number=3, where="fuzz: "),
    "snapshot": lambda b: ManifestState.decode(b, what="snapshot"),
    "gc_boundary": lambda b: GCBoundary.decode(b, what="gc"),
    "dataset": lambda b: Layout.from_json(DatasetInfo.decode(b, what="dataset.json").layout),
}
DATASET = DatasetInfo({"dp": 2, "cp": 1, "seq_keys": ["ids"], "cp_order": "contiguous"}, {"ids": {"dtype": "int32"}},
                      {"vocab_size": 7}, "ab" * 32, 1.0).to_json()


@FUZZ
@given(data=mutated_json(VERSION))
def test_fuzz_version_fields(data: bytes) -> None:
    _bounded(lambda: PARSERS["version"](data), 64 * len(data) + (1 << 20))


@FUZZ
@given(data=mutated_json(DATASET))
def test_fuzz_dataset_json_fields(data: bytes) -> None:
    _bounded(lambda: PARSERS["dataset"](data), 64 * len(data) + (1 << 20))


@FUZZ
@given(parser=st.sampled_from(sorted(PARSERS)), data=st.binary(max_size=512) | mutated(VALID_VERSION))
def test_fuzz_manifest_bytes(parser: str, data: bytes) -> None:
    _bounded(lambda: PARSERS[parser](data), 64 * len(data) + (1 << 20))


@FUZZ
@given(data=mutated_json({"format": 1, "checkpoint_id": "ck", "step": 3, "version": 2, "sub_step": 0, "time": 1.0}))
def test_fuzz_watermark(data: bytes) -> None:
    from torch_tgb.manifest.watermarks import Watermark

    def parse() -> None:
        try:
            obj = json.loads(data)
        except ValueError:
            return
        Watermark.from_json(obj, key="_tgb/watermarks/ck.json")

    _bounded(parse, 64 * len(data) + (1 << 20))


# --- LLMBATCH ---------------------------------------------------------------------

VALID_LLM = LLMBatchHeader(1, 4, 16, 3, 0, 7, 12).pack()


@FUZZ
@given(
    header=mutated(VALID_LLM) | st.binary(max_size=HEADER_SIZE + 16),
    file_size=st.integers(0, 2**63 - 1) | st.integers(0, 1 << 20),
)
def test_fuzz_llmbatch_header(header: bytes, file_size: int) -> None:
    def parse() -> None:
        h = LLMBatchHeader.parse(header, path="fuzz.llmbatch", file_size=file_size)
        assert h.file_size <= file_size  # never trusts more batches than the file holds
        assert h.batch_size >= 1 and h.seq_len >= 1

    _bounded(parse, 64 * len(header) + (1 << 20))


@FUZZ
@given(fields=st.tuples(*[st.integers(0, 2**32 - 1)] * 2, st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1)))
def test_fuzz_llmbatch_reader_file(tmp_path_factory, fields) -> None:
    """The reader on a real file with hostile header numbers: TGBError or in-bounds batches."""
    from torch_tgb.format.llmbatch import LLMBatchReader, MAGIC

    batch_size, seq_len, num_batches, dtype = fields
    head = struct.pack("<8sIIIQIII", MAGIC, 1, batch_size, seq_len, num_batches, dtype % 2, 0, 0)
    path = tmp_path_factory.mktemp("llm") / "f.llmbatch"
    path.write_bytes(head + bytes(HEADER_SIZE - len(head)) + bytes(3 * 4096))

    def read() -> None:
        with LLMBatchReader(path) as r:
            for i in range(min(len(r), 4)):
                r.read_batch(i)

    _bounded(read, 1 << 22)


@st.composite
def resealed(draw, valid: bytes) -> bytes:
    """Footer-table edits with the footer CRC recomputed, so parsing goes past the checksum."""
    from torch_tgb.format._footer import TRAILER_MAGIC, crc32c_of

    offset, length = parse_trailer(valid[-TRAILER_SIZE:], key="k", size=len(valid))
    body = bytearray(valid[offset : offset + length])
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(body) - 1))
        width = draw(st.sampled_from([1, 2, 4, 8]))
        value = draw(st.sampled_from([0, 1, 3, 7, 64, 4095, 4096, 2**31, 2**32 - 1, 2**63, 2**64 - 1]) | st.integers(0, 2**64 - 1))
        body[pos : pos + width] = (value % (1 << (8 * width))).to_bytes(width, "little")[: len(body) - pos]
    trailer = struct.pack("<QII8s", len(body), crc32c_of(bytes(body)), 1, TRAILER_MAGIC)
    return valid[:offset] + bytes(body) + trailer


@FUZZ
@given(data=resealed(VALID) | resealed(_tgb_bytes(dp=1, cp=2)))
def test_fuzz_footer_tables_past_the_crc(data: bytes) -> None:
    _bounded(lambda: _read_all(data), 8 * len(data) + (1 << 20))
