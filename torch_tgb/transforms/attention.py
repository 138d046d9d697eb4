"""Attention masks for packed rows: no token attends across a document boundary.

``document_ids`` is what ``Pack`` writes: the span index of each token in its
row, ``-1`` on padding. Padding is trailing and is treated as one more
segment of its own: a padding token attends (causally) to padding only, and
no real token ever attends to padding. That keeps every query row of the
mask non-empty, so ``scaled_dot_product_attention`` never produces NaN for
padding positions (their outputs are meaningless and their labels are
``-100``). ``cu_seqlens`` from ``Pack`` describes exactly the same segments.

- :func:`document_mask`: a dense bool block-diagonal causal mask for
  ``torch.nn.functional.scaled_dot_product_attention(attn_mask=...)``
  (``True`` = may attend); O(L²) memory, fine for short rows and tests.
- :func:`document_block_mask`: the same as a ``flex_attention`` ``BlockMask``
  (sparse by blocks; the way to go at long context).
- :func:`flatten_cu_seqlens`: per-row ``cu_seqlens`` ``[B, L + 1]`` -> the
  1-D offsets of the flattened batch ``[B * L]`` for varlen flash attention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

__all__ = ["document_block_mask", "document_mask", "flatten_cu_seqlens"]


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """Bool mask, ``[L, L]`` for ids ``[L]`` or ``[B, 1, L, L]`` for ``[B, L]``: same segment and causal."""
    if document_ids.dim() not in (1, 2):
        raise ValueError(f"document_ids must be [L] or [B, L], got shape {tuple(document_ids.shape)}")
    ids = document_ids.unsqueeze(0) if document_ids.dim() == 1 else document_ids
    length = ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=ids.device).tril()
    mask = (ids[:, :, None] == ids[:, None, :]) & causal
    return mask[0] if document_ids.dim() == 1 else mask[:, None]


def document_block_mask(document_ids: torch.Tensor, *, block_size: int = 128) -> BlockMask:
    """A ``flex_attention`` ``BlockMask`` equal to :func:`document_mask` (``[B, 1, L, L]``).

    Built on ``document_ids``' device; needs ``torch.nn.attention.flex_attention``
    (torch >= 2.5; ``create_block_mask`` also runs on CPU). Rows whose length
    is not a multiple of ``block_size`` are handled by the BlockMask itself.
    """
    try:
        from torch.nn.attention.flex_attention import create_block_mask
    except ImportError as e:  # pragma: no cover - depends on the torch build
        raise ImportError("document_block_mask needs torch.nn.attention.flex_attention (torch >= 2.5)") from e
    if document_ids.dim() not in (1, 2):
        raise ValueError(f"document_ids must be [L] or [B, L], got shape {tuple(document_ids.shape)}")
    ids = document_ids.unsqueeze(0) if document_ids.dim() == 1 else document_ids
    batch, length = ids.shape

    def same_document_causal(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return (ids[b, q] == ids[b, kv]) & (q >= kv)

    return create_block_mask(
        same_document_causal, B=batch, H=None, Q_LEN=length, KV_LEN=length, device=ids.device, BLOCK_SIZE=block_size
    )


def flatten_cu_seqlens(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """``[B, L + 1]`` per-row offsets -> int32 offsets into the flattened ``[B * L]`` tokens.

    Row ``r``'s boundaries are shifted by ``r * L``; zero-length segments (the
    padding entries of a row) are dropped. The matching ``max_seqlen`` is
    ``max_seqlen.max()`` over the rows.
    """
    if cu_seqlens.dim() != 2 or cu_seqlens.shape[1] < 2:
        raise ValueError(f"cu_seqlens must be [B, L + 1], got shape {tuple(cu_seqlens.shape)}")
    length = cu_seqlens.shape[1] - 1
    shift = torch.arange(cu_seqlens.shape[0], device=cu_seqlens.device, dtype=torch.int64)[:, None] * length
    flat = (cu_seqlens.to(torch.int64) + shift).reshape(-1)
    unique: torch.Tensor = torch.unique_consecutive(flat)
    return unique.to(torch.int32)
