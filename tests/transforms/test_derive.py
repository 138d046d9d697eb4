"""Derived per-token tensors equal what pack_rows stores, for any packing and any share of a row."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms import pack, pack_rows
from torch_tgb.transforms.derive import (
    SequenceBounds,
    derived_arrays,
    document_ids,
    ignored_labels,
    mask_labels,
    padding_at,
    padding_problem,
    position_ids,
    row_cu_seqlens,
    seq_lens_problem,
)
from torch_tgb.transforms.token_rows import chunk_spans, concat_spans, spans_from_bins, token_rows


def spans_to_ragged(bins: list, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows' span lengths as ragged ``seq_lens`` (values, offsets)."""
    lengths = [end - start for row in bins for _, start, end in row]
    counts = [len(row) for row in bins]
    return torch.tensor(lengths, dtype=torch.int32), torch.tensor(np.concatenate([[0], np.cumsum(counts)]), dtype=torch.int64)


@settings(max_examples=150, deadline=None)
@given(
    docs=st.lists(st.integers(0, 40), min_size=1, max_size=25),
    seq_len=st.sampled_from([4, 8, 16]),
    method=st.sampled_from(["bfd", "concat"]),
    share=st.sampled_from([(0, 1), (0, 2), (1, 2), (1, 4), (3, 4)]),
)
def test_derived_tensors_equal_the_stored_ones(docs, seq_len, method, share) -> None:
    offsets = np.concatenate([[0], np.cumsum(docs)]).astype(np.int64)
    flat = np.arange(offsets[-1], dtype=np.int64) % 50 + 1
    bins = pack(np.asarray(docs), seq_len, method)
    if not bins:
        return
    stored = pack_rows(flat, offsets, bins, seq_len, attention_metadata=True)
    lengths, row_offsets = spans_to_ragged(bins, seq_len)
    # the token after each row: what a labels_from row stores (any value: the last label is masked anyway)
    tokens = torch.from_numpy(np.concatenate([stored["input_ids"], np.zeros((len(bins), 1), np.int64)], axis=1))
    k, parts = share
    positions = torch.arange(k * seq_len // parts, (k + 1) * seq_len // parts)
    bounds = SequenceBounds(lengths, row_offsets, seq_len, positions)
    raw = tokens[:, positions + 1]
    assert torch.equal(mask_labels(raw, bounds), torch.from_numpy(stored["labels"])[:, positions])
    assert torch.equal(position_ids(bounds), torch.from_numpy(stored["position_ids"]).long()[:, positions])
    assert torch.equal(document_ids(bounds), torch.from_numpy(stored["document_ids"]).int()[:, positions])
    assert torch.equal(row_cu_seqlens(lengths, row_offsets, seq_len), torch.from_numpy(stored["cu_seqlens"]))


@settings(max_examples=150, deadline=None)
@given(
    docs=st.lists(st.integers(0, 40), min_size=1, max_size=25),
    seq_len=st.sampled_from([4, 8, 16]),
    method=st.sampled_from(["bfd", "concat"]),
    cp=st.sampled_from([1, 2, 4]),
    zigzag=st.booleans(),
    rank=st.integers(0, 3),
)
def test_the_fast_mask_ignores_exactly_what_pack_rows_ignores(docs, seq_len, method, cp, zigzag, rank) -> None:
    """ignored_labels over any cp share (contiguous or zig-zag ranges) masks the labels pack_rows stores as -100."""
    from torch_tgb.layout import cp_ranges

    offsets = np.concatenate([[0], np.cumsum(docs)]).astype(np.int64)
    bins = pack(np.asarray(docs), seq_len, method)
    if not bins:
        return
    stored = pack_rows(np.arange(offsets[-1], dtype=np.int64) + 1, offsets, bins, seq_len)
    lengths, row_offsets = spans_to_ragged(bins, seq_len)
    ranges = [(int(lo * seq_len), int(hi * seq_len)) for lo, hi in cp_ranges(cp, "zigzag" if zigzag else "contiguous")[rank % cp]]
    columns = np.concatenate([np.arange(lo, hi) for lo, hi in ranges])
    want = stored["labels"][:, columns] == -100
    got = np.zeros(want.size, dtype=bool)
    got[ignored_labels(lengths.numpy(), row_offsets.numpy(), seq_len, ranges)] = True
    assert (got.reshape(want.shape) == want).all()


@st.composite
def ragged_lengths(draw) -> tuple[np.ndarray, np.ndarray, int]:
    """Any rows' seq_lens that fit (padding and rows of no sequence included): (lengths int32, offsets, seq_len)."""
    seq_len = draw(st.sampled_from([1, 4, 8, 16]))
    lengths, offsets = [], [0]
    for _ in range(draw(st.integers(1, 6))):
        room = seq_len
        for _ in range(draw(st.integers(0, min(4, seq_len)))):
            if not room:
                break
            n = draw(st.integers(1, room))
            lengths.append(n)
            room -= n
        offsets.append(len(lengths))
    return np.asarray(lengths, dtype=np.int32), np.asarray(offsets, dtype=np.int64), seq_len


@settings(max_examples=300, deadline=None)
@given(rows=ragged_lengths(), cp=st.sampled_from([1, 2, 4]), zigzag=st.booleans(), rank=st.integers(0, 3))
def test_the_numpy_derivations_equal_the_torch_ones(rows, cp, zigzag, rank) -> None:
    """derived_arrays (the reader's path) == the torch functions over SequenceBounds, for any rows and cp share."""
    from torch_tgb.layout import cp_ranges

    lengths, offsets, seq_len = rows
    if seq_len % (2 * cp):
        cp = 1
    ranges = [(int(lo * seq_len), int(hi * seq_len)) for lo, hi in cp_ranges(cp, "zigzag" if zigzag else "contiguous")[rank % cp]]
    positions = torch.from_numpy(np.concatenate([np.arange(lo, hi) for lo, hi in ranges]))
    bounds = SequenceBounds(torch.from_numpy(lengths), torch.from_numpy(offsets), seq_len, positions)
    got = derived_arrays(lengths, offsets, seq_len, ranges, ("position_ids", "document_ids", "cu_seqlens"))
    want = {"position_ids": position_ids(bounds), "document_ids": document_ids(bounds),
            "cu_seqlens": row_cu_seqlens(torch.from_numpy(lengths), torch.from_numpy(offsets), seq_len)}
    for name, tensor in want.items():
        assert got[name].dtype == tensor.numpy().dtype, name
        assert np.array_equal(got[name], tensor.numpy()), name
    assert seq_lens_problem(lengths, offsets, seq_len) is None


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(-3, 12), min_size=0, max_size=8), cuts=st.lists(st.integers(0, 8), max_size=3),
       seq_len=st.sampled_from([4, 8]))
def test_seq_lens_problem_accepts_exactly_lengths_that_fit_their_rows(lengths, cuts, seq_len) -> None:
    """Stored lengths pass iff each is >= 1 (no empty sequence) and no row holds more than seq_len tokens or sequences."""
    offsets = np.asarray([0, *sorted(min(c, len(lengths)) for c in cuts), len(lengths)], dtype=np.int64)
    arr = np.asarray(lengths, dtype=np.int32)
    rows = [arr[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    good = all(n >= 1 for n in lengths) and all(int(r.sum()) <= seq_len and len(r) <= seq_len for r in rows)
    problem = seq_lens_problem(arr, offsets, seq_len)
    assert (problem is None) == good, problem


@st.composite
def packed_rows(draw):
    """Token rows as ``Pack`` makes them (empty documents included): (rows, lengths, offsets, seq_len, pad_id)."""
    lengths = np.asarray(draw(st.lists(st.integers(0, 40), min_size=1, max_size=25)), dtype=np.int64)
    seq_len = draw(st.sampled_from([4, 8, 16]))
    method = draw(st.sampled_from(["bfd", "concat", "concat-vectorised", "none"]))
    pad_id = draw(st.sampled_from([0, 7]))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1], dtype=np.int64) % 5  # small ids: content equal to the pad id too
    if method == "none":
        spans, offsets = chunk_spans(int(lengths.sum()), seq_len), np.array([0, len(tokens)], dtype=np.int64)
    elif method == "concat-vectorised":
        spans = concat_spans(lengths, seq_len)
    else:
        spans = spans_from_bins(pack(lengths, seq_len, method))
    rows, lens, row_offsets = token_rows(tokens, offsets, spans, seq_len, pad_id=pad_id)
    return rows[:, :seq_len], lens, row_offsets, seq_len, pad_id


@settings(max_examples=150, deadline=None)
@given(packed=packed_rows())
def test_the_packer_writes_lengths_that_pass(packed) -> None:
    """Every length >= 1, and what the lengths call padding holds the pad id alone."""
    rows, lens, offsets, seq_len, pad_id = packed
    assert lens.size == 0 or int(lens.min()) >= 1
    assert seq_lens_problem(lens, offsets, seq_len) is None
    padding = padding_at(lens, offsets, seq_len, [(0, seq_len)])
    assert padding_problem(rows, padding, "input_ids") is None
    assert bool((rows[padding[0], padding[1]] == pad_id).all())


@settings(max_examples=150, deadline=None)
@given(packed=packed_rows(), data=st.data())
def test_lengths_short_of_the_content_are_found(packed, data) -> None:
    """A row's last length cut by k: refused where the k tokens it no longer counts show it.

    They show it unless they all equal the pad id, or (the limit of not knowing
    the pad id) they are one value and the step has no other padding to compare.
    """
    rows, lens, offsets, seq_len, pad_id = packed
    if not lens.size:
        return
    row = data.draw(st.sampled_from([r for r in range(len(offsets) - 1) if offsets[r + 1] > offsets[r]]))
    last = int(offsets[row + 1]) - 1
    k = data.draw(st.integers(1, max(1, int(lens[last]) - 1)))
    if k >= int(lens[last]):
        return
    short = lens.copy()
    short[last] -= k
    real = int(short[offsets[row]:offsets[row + 1]].sum())
    hidden = rows[row, real : real + k]
    problem = padding_problem(rows, padding_at(short, offsets, seq_len, [(0, seq_len)]), "input_ids")
    padded = len(padding_at(lens, offsets, seq_len, [(0, seq_len)])[0]) > 0
    shows = not bool((hidden == pad_id).all()) and (len(np.unique(hidden)) > 1 or padded)
    assert (problem is not None) == shows, problem
