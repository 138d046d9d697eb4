"""The row fields ``GlobalBatches`` reads: a padding row, its real tokens (costs: ``transforms.price_rows``). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from torch_tgb.transforms import IGNORE_INDEX
from torch_tgb.transforms.derive import SEQ_LENS_KEY

__all__ = ["pad_row", "real_tokens"]


def pad_row(like: Mapping[str, torch.Tensor], pad_id: int = 0, ragged: Sequence[str] = ()) -> dict[str, torch.Tensor]:
    """A padding row shaped like ``like``: no tokens, ignored labels, no documents, no ragged items."""
    out: dict[str, torch.Tensor] = {}
    for name, t in like.items():
        if name in ragged:  # no items
            out[name] = t.new_zeros((0, *t.shape[1:]))
        elif name == "input_ids":
            out[name] = torch.full_like(t, pad_id)
        elif name == "labels":
            out[name] = torch.full_like(t, IGNORE_INDEX)
        elif name == "document_ids":
            out[name] = torch.full_like(t, -1)
        elif name == "cu_seqlens":  # one padding segment: [0, L, L, ...]
            out[name] = torch.full_like(t, t.shape[-1] - 1)
            out[name][..., 0] = 0
        elif name == "max_seqlen":
            out[name] = torch.full_like(t, like["cu_seqlens"].shape[-1] - 1 if "cu_seqlens" in like else 0)
        else:
            out[name] = torch.zeros_like(t)
    return out


def real_tokens(row: Mapping[str, torch.Tensor]) -> int:
    """Real tokens of ``row``: from its ``seq_lens``, else ``document_ids >= 0``, else all of ``input_ids``."""
    if SEQ_LENS_KEY in row:
        return int(row[SEQ_LENS_KEY].sum())
    if "document_ids" in row:
        return int((row["document_ids"] >= 0).sum())
    return int(row["input_ids"].numel()) if "input_ids" in row else 0
