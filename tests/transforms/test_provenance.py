"""Provenance ids of packed rows (transforms.provenance): names, unit keys, extents, hashes, span ids."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from torch_tgb.transforms.provenance import (
    MAX_SPAN,
    RecordId,
    SourceInfo,
    doc_ids,
    pack_extent,
    record_hash,
    span_provenance,
    split_unit_key,
    unit_key,
    unpack_extent,
)
from torch_tgb.transforms.token_rows import concat_spans

names = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="._-"), min_size=1, max_size=12)


@given(names, st.text(min_size=1, max_size=30).filter(lambda u: u.strip() == u and u), st.integers(0, 2**62))
def test_record_ids_print_and_parse_back(source: str, unit: str, record: int) -> None:
    rid = RecordId(source, unit, record)
    assert RecordId.parse(str(rid)) == rid


def test_a_unit_may_hold_colons_and_a_bad_record_is_refused() -> None:
    assert RecordId.parse("web:s3://bucket/shard-0001.tar:17") == RecordId("web", "s3://bucket/shard-0001.tar", 17)
    for bad in ("web:17", "web:unit:x", ":unit:1", "web::1", "web:unit:-1"):
        with pytest.raises(ValueError):
            RecordId.parse(bad)


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**32 - 1))
def test_unit_keys_split_back(source: int, unit: int) -> None:
    key = unit_key(source, unit)
    assert 0 <= key < 2**63 and split_unit_key(key) == (source, unit)
    arr_s, arr_u = split_unit_key(np.array([key], dtype=np.int64))
    assert (int(arr_s[0]), int(arr_u[0])) == (source, unit)


@given(st.lists(st.tuples(st.integers(0, 2**38), st.integers(0, MAX_SPAN)), min_size=1, max_size=20))
def test_extents_unpack_to_start_and_length(pairs: list[tuple[int, int]]) -> None:
    starts, lengths = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    got_s, got_l = unpack_extent(pack_extent(starts, lengths))
    assert np.array_equal(got_s, starts) and np.array_equal(got_l, lengths)


def test_an_extent_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError):
        pack_extent(0, MAX_SPAN + 1)
    with pytest.raises(ValueError):
        pack_extent(-1, 3)


@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), min_size=1, max_size=30))
def test_record_hash_is_a_vectorised_function_of_the_pair(pairs: list[tuple[int, int]]) -> None:
    units, records = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    together = record_hash(units, records)
    one_by_one = [int(record_hash(u, r)) for u, r in pairs]
    assert together.dtype == np.uint64 and together.tolist() == one_by_one
    # a different pair gives a different hash (no collision among these few)
    assert len(set(one_by_one)) == len(set(pairs))


def test_source_ids_follow_the_description() -> None:
    a = SourceInfo("web", "TokenFile", ("a.npy",))
    assert a.source_id == SourceInfo("web", "TokenFile", ("a.npy",)).source_id
    assert a.source_id != SourceInfo("web", "TokenFile", ("b.npy",)).source_id
    assert 0 <= a.source_id < 2**31
    with pytest.raises(ValueError):
        SourceInfo("has:colon", "TokenFile", ())
    info = SourceInfo("web", "Parquet", ("/data/part-0.parquet", "/data/part-1.parquet"))
    assert info.unit_index("/data/part-1.parquet") == 1 and info.unit_index("part-0.parquet") == 0
    assert info.unit_index("1") == 1
    with pytest.raises(ValueError):
        info.unit_index("part-9.parquet")


@given(st.lists(st.integers(0, 40), min_size=1, max_size=20), st.integers(1, 16))
def test_span_provenance_names_each_piece_of_each_document(lengths: list[int], seq_len: int) -> None:
    ids = doc_ids(unit_key(5, 2), np.arange(100, 100 + len(lengths)), np.arange(len(lengths)) * 1000)
    spans = concat_spans(np.array(lengths), seq_len)
    prov = span_provenance(ids, spans.doc, spans.start, spans.length)
    assert (prov[:, 0] == unit_key(5, 2)).all()
    assert np.array_equal(prov[:, 1], 100 + spans.doc)
    starts, length = unpack_extent(prov[:, 2])
    assert np.array_equal(starts, spans.doc * 1000 + spans.start) and np.array_equal(length, spans.length)
    # every token of every document is named exactly once
    for d, n in enumerate(lengths):
        mine = spans.doc == d
        assert int(length[mine].sum()) == n
