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
    position_ids,
    row_cu_seqlens,
    seq_lens_problem,
)


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
    """Any rows' seq_lens that fit (empty sequences and padding included): (lengths int32, offsets, seq_len)."""
    seq_len = draw(st.sampled_from([1, 4, 8, 16]))
    lengths, offsets = [], [0]
    for _ in range(draw(st.integers(1, 6))):
        room = seq_len
        for _ in range(draw(st.integers(0, min(4, seq_len)))):
            n = draw(st.integers(0, room))
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
    """Stored lengths pass iff none is negative and no row holds more than seq_len tokens or sequences."""
    offsets = np.asarray([0, *sorted(min(c, len(lengths)) for c in cuts), len(lengths)], dtype=np.int64)
    arr = np.asarray(lengths, dtype=np.int32)
    rows = [arr[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    good = all(n >= 0 for n in lengths) and all(int(r.sum()) <= seq_len and len(r) <= seq_len for r in rows)
    problem = seq_lens_problem(arr, offsets, seq_len)
    assert (problem is None) == good, problem
