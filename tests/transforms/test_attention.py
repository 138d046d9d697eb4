"""Document masks for packed rows: dense SDPA mask, flex_attention BlockMask, flattened cu_seqlens."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms import document_block_mask, document_mask, flatten_cu_seqlens, pack_bfd, pack_rows


@st.composite
def rows(draw: st.DrawFn) -> np.ndarray:
    """document_ids of packed rows: spans 0, 1, ... then trailing padding -1."""
    seq_len = draw(st.integers(1, 16))
    batch = draw(st.integers(1, 3))
    out = np.full((batch, seq_len), -1, dtype=np.int32)
    for r in range(batch):
        pos, doc = 0, 0
        while pos < seq_len and draw(st.booleans()):
            n = draw(st.integers(1, seq_len - pos))
            out[r, pos : pos + n] = doc
            pos, doc = pos + n, doc + 1
    return out


def brute_force_mask(ids: np.ndarray) -> np.ndarray:
    batch, length = ids.shape
    mask = np.zeros((batch, 1, length, length), dtype=bool)
    for b in range(batch):
        for q in range(length):
            for k in range(length):
                mask[b, 0, q, k] = k <= q and ids[b, q] == ids[b, k]  # padding (-1) is one segment of its own
    return mask


@settings(max_examples=80, deadline=None)
@given(rows())
def test_document_mask_equals_brute_force(ids: np.ndarray) -> None:
    mask = document_mask(torch.from_numpy(ids))
    assert mask.dtype == torch.bool and mask.shape == (ids.shape[0], 1, ids.shape[1], ids.shape[1])
    assert np.array_equal(mask.numpy(), brute_force_mask(ids))
    assert mask.any(dim=-1).all(), "every query attends to something: no NaN in SDPA"
    assert torch.equal(document_mask(torch.from_numpy(ids[0])), mask[0, 0])


def test_sdpa_with_the_mask_isolates_documents() -> None:
    ids = torch.tensor([[0, 0, 0, 1, 1, -1, -1, -1]])
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(ids))
    assert torch.isfinite(out).all()
    # document 1 alone (positions 3-4) gives the same result as attending inside the whole row
    alone = torch.nn.functional.scaled_dot_product_attention(q[:, :, 3:5], k[:, :, 3:5], v[:, :, 3:5], is_causal=True)
    assert torch.allclose(out[:, :, 3:5], alone, atol=1e-6)


def _flex() -> object:
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError:
        pytest.skip("torch.nn.attention.flex_attention is not available in this torch build")
    return flex_attention


def test_block_mask_matches_the_dense_mask() -> None:
    flex_attention = _flex()
    lengths = [5, 30, 3, 17, 40, 9]
    bins = pack_bfd(lengths, 48)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ids = torch.from_numpy(pack_rows(np.arange(offsets[-1]), offsets, bins, 48)["document_ids"])
    block_mask = document_block_mask(ids, block_size=16)
    torch.manual_seed(0)
    q, k, v = (torch.randn(ids.shape[0], 2, 48, 8) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile": fine for a test
        got = flex_attention(q, k, v, block_mask=block_mask)  # type: ignore[operator]
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(ids))
    assert torch.allclose(got, want, atol=1e-5)


def test_flatten_cu_seqlens() -> None:
    cu = torch.tensor([[0, 3, 5, 8, 8, 8, 8, 8, 8], [0, 8, 8, 8, 8, 8, 8, 8, 8]], dtype=torch.int32)
    assert flatten_cu_seqlens(cu).tolist() == [0, 3, 5, 8, 16]
    with pytest.raises(ValueError):
        flatten_cu_seqlens(torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError):
        document_mask(torch.zeros(1, 2, 3))
