"""BFD packing and row materialisation: no token lost or duplicated, no row overflows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms import IGNORE_INDEX, pack, pack_bfd, pack_concat, pack_rows, packing_efficiency


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(0, 60), max_size=40), seq_len=st.integers(1, 32))
def test_bfd_never_loses_or_duplicates_a_token(lengths, seq_len):
    bins = pack_bfd(lengths, seq_len)
    covered = {d: [] for d in range(len(lengths))}
    for row in bins:
        assert row, "no empty rows"
        assert sum(e - s for _, s, e in row) <= seq_len
        for doc, s, e in row:
            assert 0 <= s < e <= lengths[doc]
            covered[doc].append((s, e))
    for doc, n in enumerate(lengths):
        spans = sorted(covered[doc])
        pos = 0
        for s, e in spans:
            assert s == pos, f"gap or overlap in document {doc}"
            pos = e
        assert pos == n
    assert pack_bfd(lengths, seq_len) == bins  # deterministic


def _bfd_by_the_book(lengths: list[int], seq_len: int) -> list[list[tuple[int, int, int]]]:
    """Best-fit decreasing as its definition reads: full chunks first (one row each, in document order), then
    the partial chunks longest first (ties: lower document), each into the row with the least free space that
    holds it (ties: the row that reached that free space last), else a new row. Quadratic: a reference."""
    rows: list[list[tuple[int, int, int]]] = []
    for doc, n in enumerate(lengths):
        rows += [[(doc, k * seq_len, (k + 1) * seq_len)] for k in range(n // seq_len)]
    chunks = sorted(((n % seq_len, doc, n - n % seq_len) for doc, n in enumerate(lengths) if n % seq_len),
                    key=lambda c: (-c[0], c[1]))
    free: dict[int, int] = {}  # row -> its free space, in the order rows reached it
    for length, doc, start in chunks:
        fits = [(space, -order) for order, (row, space) in enumerate(free.items()) if space >= length]
        if fits:
            space, neg = min(fits)
            row = list(free)[-neg]
            del free[row]
        else:
            row, space = len(rows), seq_len
            rows.append([])
        rows[row].append((doc, start, start + length))
        if space - length:
            free[row] = space - length
    return rows


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 90), max_size=50), seq_len=st.integers(1, 32))
def test_bfd_is_best_fit_decreasing_by_the_book(lengths, seq_len):
    """The vectorised full chunks, the numpy sort and the free-space index give the textbook packing."""
    assert pack_bfd(np.asarray(lengths, dtype=np.int64), seq_len) == _bfd_by_the_book(lengths, seq_len)


def test_bfd_best_fit_example():
    # 7 then 5 (new rows), 3 fits the row with 3 free (best fit, not first fit), 1 -> row with 1 free
    bins = pack_bfd([7, 5, 3, 1, 10], 10)
    assert bins == [[(4, 0, 10)], [(0, 0, 7), (2, 0, 3)], [(1, 0, 5), (3, 0, 1)]]
    assert packing_efficiency(bins, 10) == pytest.approx(26 / 30)


def test_long_documents_are_chunked_not_dropped():
    bins = pack_bfd([25], 10)
    assert sorted(span for row in bins for span in row) == [(0, 0, 10), (0, 10, 20), (0, 20, 25)]


def test_bfd_bad_input():
    with pytest.raises(ValueError):
        pack_bfd([1, 2], 0)
    with pytest.raises(ValueError):
        pack_bfd([1, -2], 4)
    assert pack_bfd([], 4) == [] and packing_efficiency([], 4) == 1.0


@settings(max_examples=100, deadline=None)
@given(lengths=st.lists(st.integers(0, 30), max_size=20), seq_len=st.integers(2, 16))
def test_pack_rows_materialises_masks(lengths, seq_len):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1], dtype=np.int64) + 1  # token = 1 + global position: unique
    bins = pack_bfd(lengths, seq_len)
    rows = pack_rows(tokens, offsets, bins, seq_len, pad_id=0)
    ids, labels, docs, pos = rows["input_ids"], rows["labels"], rows["document_ids"], rows["position_ids"]
    assert ids.shape == (len(bins), seq_len)
    real = ids[docs >= 0]
    assert sorted(real.tolist()) == tokens.tolist()  # every token exactly once
    assert (ids[docs < 0] == 0).all() and (labels[docs < 0] == IGNORE_INDEX).all()
    for r in range(len(bins)):
        for i in range(seq_len):
            if docs[r, i] < 0:
                continue
            same_next = i + 1 < seq_len and docs[r, i + 1] == docs[r, i]
            assert labels[r, i] == (ids[r, i + 1] if same_next else IGNORE_INDEX)
            if i and docs[r, i - 1] == docs[r, i]:
                assert pos[r, i] == pos[r, i - 1] + 1 and ids[r, i] == ids[r, i - 1] + 1
            else:
                assert pos[r, i] == 0


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=20), seq_len=st.integers(1, 16), method=st.sampled_from(["bfd", "concat"]))
def test_pack_conserves_tokens_and_never_crosses_a_document(lengths, seq_len, method):
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1], dtype=np.int64) + 1  # unique: token t belongs to the doc whose range holds t-1
    owner = np.searchsorted(offsets, tokens - 1, side="right") - 1
    bins = pack(lengths, seq_len, method)
    rows = pack_rows(tokens, offsets, bins, seq_len, attention_metadata=True)
    ids, docs, pos, cu, mx = (rows[k] for k in ("input_ids", "document_ids", "position_ids", "cu_seqlens", "max_seqlen"))
    assert sorted(ids[docs >= 0].tolist()) == tokens.tolist()  # every token exactly once
    assert cu.dtype == np.int32 and cu.shape == (len(bins), seq_len + 1)
    assert mx.dtype == np.int32 and mx.shape == (len(bins), 1)
    for r in range(len(bins)):
        bounds = cu[r]
        assert bounds[0] == 0 and bounds[-1] == seq_len and (np.diff(bounds) >= 0).all()
        segments = [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]
        assert sum(b - a for a, b in segments) == seq_len and mx[r, 0] == max(b - a for a, b in segments)
        for a, b in segments:
            seg_docs = set(docs[r, a:b].tolist())
            assert len(seg_docs) == 1, "a cu_seqlens segment never crosses a document"
            if seg_docs != {-1}:
                assert len(set(owner[ids[r, a:b] - 1].tolist())) == 1
                assert pos[r, a:b].tolist() == list(range(b - a))
            else:
                assert b == seq_len  # padding is trailing
    if method == "concat":
        assert all(sum(e - s for _, s, e in row) == seq_len for row in bins[:-1]), "only the last row is padded"


def test_concat_fills_rows_in_order_and_splits_documents():
    assert pack_concat([3, 6, 0, 2], 4) == [[(0, 0, 3), (1, 0, 1)], [(1, 1, 5)], [(1, 5, 6), (3, 0, 2)]]
    assert pack([3], 4, "concat") == [[(0, 0, 3)]]
    with pytest.raises(ValueError, match="unknown packing method"):
        pack([3], 4, "ffd")
    rows = pack_rows(np.arange(1, 4), np.array([0, 3]), [[(0, 0, 3)]], 4, attention_metadata=True)
    assert rows["cu_seqlens"].tolist() == [[0, 3, 4, 4, 4]] and rows["max_seqlen"].tolist() == [[3]]
    assert rows["labels"].tolist() == [[2, 3, IGNORE_INDEX, IGNORE_INDEX]]
