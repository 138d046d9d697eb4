"""BFD packing and row materialisation: no token lost or duplicated, no row overflows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms import IGNORE_INDEX, pack_bfd, pack_rows, packing_efficiency


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
