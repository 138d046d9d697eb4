"""Excision of packed rows (transforms.excision): denied spans go, every other span stays exactly as it was."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms.excision import excise_array_rows, excise_token_rows
from torch_tgb.transforms.packing import IGNORE_INDEX, pack_rows
from torch_tgb.transforms.provenance import doc_ids, span_provenance, unit_key
from torch_tgb.transforms.token_rows import concat_spans, spans_from_bins, token_rows
from torch_tgb.transforms import pack_bfd

PAD = 7


def _window(lengths: list[int], seq_len: int, method: str):
    rng = np.random.default_rng(len(lengths) * 31 + seq_len)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(100, 60_000, size=int(offsets[-1])).astype(np.int64)
    spans = spans_from_bins(pack_bfd(np.array(lengths), seq_len)) if method == "bfd" else \
        concat_spans(np.array(lengths), seq_len)
    ids = doc_ids(unit_key(1, 0), np.arange(len(lengths)))
    prov = span_provenance(ids, spans.doc, spans.start, spans.length)
    return tokens, offsets, spans, prov


def _row_pieces(row_tokens: np.ndarray, lens: np.ndarray) -> list[list[int]]:
    out, at = [], 0
    for n in lens.tolist():
        out.append(row_tokens[at : at + n].tolist())
        at += n
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=25), st.integers(4, 32), st.sampled_from(["bfd", "concat"]),
       st.data())
def test_token_rows_lose_exactly_the_denied_spans(lengths, seq_len, method, data) -> None:
    tokens, offsets, spans, prov = _window(lengths, seq_len, method)
    rows, lens, firsts = token_rows(tokens, offsets, spans, seq_len, pad_id=PAD)
    denied_docs = set(data.draw(st.sets(st.integers(0, len(lengths) - 1), max_size=len(lengths))))
    deny = np.isin(prov[:, 1], list(denied_docs))
    out = excise_token_rows(rows, (lens, firsts), (prov, firsts), deny, pad_id=PAD)
    new_rows = out.arrays["input_ids"]
    new_lens, new_firsts = out.seq_lens
    new_prov, new_prov_offs = out.provenance
    assert new_rows.shape == rows.shape and np.array_equal(new_firsts, new_prov_offs)
    for r in range(spans.rows):
        before = _row_pieces(rows[r], lens[firsts[r] : firsts[r + 1]])
        kept = [p for p, d in zip(before, deny[firsts[r] : firsts[r + 1]]) if not d]
        after = _row_pieces(new_rows[r], new_lens[new_firsts[r] : new_firsts[r + 1]])
        assert after == kept  # every other span intact, in order
        used = sum(len(p) for p in kept)
        assert (new_rows[r, used:] == PAD).all()  # the rest is padding, the extra column too
    assert not np.isin(new_prov[:, 1], list(denied_docs)).any()
    assert out.tokens == sum(lengths[d] for d in denied_docs)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=15), st.integers(4, 24), st.data())
def test_array_rows_after_excision_are_the_rows_packing_the_rest_gives(lengths, seq_len, data) -> None:
    tokens, offsets, spans, prov = _window(lengths, seq_len, "bfd")
    bins = [[] for _ in range(spans.rows)]
    for r, d, a, n in zip(spans.row.tolist(), spans.doc.tolist(), spans.start.tolist(), spans.length.tolist()):
        bins[r].append((d, a, a + n))
    rows = pack_rows(tokens, offsets, bins, seq_len, pad_id=PAD, attention_metadata=True)
    firsts = np.concatenate([[0], np.cumsum([len(b) for b in bins])]).astype(np.int64)
    denied = set(data.draw(st.sets(st.integers(0, len(lengths) - 1), max_size=len(lengths))))
    out = excise_array_rows(rows, (prov, firsts), np.isin(prov[:, 1], list(denied)), pad_id=PAD)
    # what packing gives when each row holds only its kept spans, in order
    kept_bins = [[s for s in b if s[0] not in denied] for b in bins]
    expected = pack_rows(tokens, offsets, kept_bins, seq_len, pad_id=PAD, attention_metadata=True)
    for name in ("input_ids", "labels", "document_ids", "position_ids", "cu_seqlens", "max_seqlen"):
        assert np.array_equal(out.arrays[name], expected[name]), name
    assert (out.arrays["labels"][out.arrays["document_ids"] < 0] == IGNORE_INDEX).all()
