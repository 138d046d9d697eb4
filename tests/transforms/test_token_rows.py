"""Token rows hold exactly what pack_rows spreads over four arrays, from any packer, with nothing lost."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms import pack, pack_concat, pack_rows
from torch_tgb.transforms.token_rows import chunk_spans, concat_spans, spans_from_bins, token_rows

DOCS = st.lists(st.integers(0, 60), min_size=1, max_size=30)


def corpus(docs: list[int]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum(docs)]).astype(np.int64)
    return (np.arange(offsets[-1], dtype=np.int64) * 7 % 50021 + 1).astype(np.uint32), offsets


@settings(max_examples=200, deadline=None)
@given(docs=DOCS, seq_len=st.sampled_from([1, 4, 16, 64]), method=st.sampled_from(["bfd", "concat"]))
def test_token_rows_equal_pack_rows(docs, seq_len, method) -> None:
    tokens, offsets = corpus(docs)
    bins = pack(np.asarray(docs), seq_len, method)
    rows, lens, row_offsets = token_rows(tokens, offsets, spans_from_bins(bins), seq_len)
    assert rows.dtype == np.uint32 and rows.shape == (len(bins), seq_len + 1)
    if bins:
        want = pack_rows(tokens.astype(np.int64), offsets, bins, seq_len)
        assert (rows[:, :seq_len] == want["input_ids"]).all()
        for r, row in enumerate(bins):
            assert lens[row_offsets[r] : row_offsets[r + 1]].tolist() == [end - start for _, start, end in row]
    assert int(lens.sum()) == int(tokens.size)  # every token once


@settings(max_examples=200, deadline=None)
@given(docs=DOCS, seq_len=st.sampled_from([1, 3, 16, 64]))
def test_vectorised_concat_is_pack_concat(docs, seq_len) -> None:
    got = concat_spans(docs, seq_len)
    want = spans_from_bins(pack_concat(docs, seq_len))
    assert got.rows == want.rows
    for name in ("row", "doc", "start", "length"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name


@settings(max_examples=100, deadline=None)
@given(docs=DOCS, seq_len=st.sampled_from([1, 5, 16]))
def test_chunks_cut_the_stream_in_order(docs, seq_len) -> None:
    tokens, _ = corpus(docs)
    rows, lens, offsets = token_rows(tokens, np.array([0, tokens.size]), chunk_spans(tokens.size, seq_len), seq_len,
                                     pad_id=0)
    assert offsets.tolist() == list(range(rows.shape[0] + 1))  # one sequence a row
    flat = np.concatenate([rows[r, : lens[r]] for r in range(rows.shape[0])]) if rows.shape[0] else rows.reshape(-1)
    assert flat.tolist() == tokens.tolist()


@settings(max_examples=200, deadline=None)
@given(docs=DOCS, seq_len=st.sampled_from([1, 2, 5, 16]), chunked=st.booleans(), pad_id=st.sampled_from([0, 9]))
def test_rows_are_one_copy_per_span(docs, seq_len, chunked, pad_id) -> None:
    """The rows are each span's tokens at its place and pad elsewhere (the strided copy of chunks included)."""
    tokens, offsets = corpus(docs)
    spans = chunk_spans(tokens.size, seq_len) if chunked else spans_from_bins(pack(np.asarray(docs), seq_len, "bfd"))
    rows, lens, _ = token_rows(tokens, offsets, spans, seq_len, pad_id=pad_id, dtype=np.int64)
    want = np.full((spans.rows, seq_len + 1), pad_id, dtype=np.int64)
    at = np.zeros(spans.rows, dtype=np.int64)
    for r, d, a, k in zip(spans.row.tolist(), spans.doc.tolist(), spans.start.tolist(), spans.length.tolist()):
        want[r, at[r] : at[r] + k] = tokens[offsets[d] + a : offsets[d] + a + k]
        at[r] += k
    assert rows.dtype == np.int64 and np.array_equal(rows, want)


def test_overflowing_spans_are_refused() -> None:
    from torch_tgb.transforms.token_rows import Spans

    with pytest.raises(ValueError, match="overflow"):
        token_rows(np.arange(10), np.array([0, 10]), Spans(1, [0, 0], [0, 0], [0, 5], [5, 5]), 8)
