"""A tiny GPT-style language model for the examples (CPU-friendly, a few thousand parameters).

Not part of torch_tgb: the examples import it from their own directory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100


class TinyGPT(nn.Module):
    """Token + position embeddings, ``layers`` causal transformer blocks, a tied LM head."""

    def __init__(self, *, vocab_size: int, seq_len: int, d_model: int = 32, layers: int = 2, heads: int = 2) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(seq_len, d_model)
        block = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)
        self.register_buffer("mask", torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        n = input_ids.shape[1]
        positions = torch.arange(n, device=input_ids.device)
        x = self.tokens(input_ids) + self.positions(positions)
        x = self.blocks(x, mask=self.mask[:n, :n], is_causal=True)
        return self.norm(x) @ self.tokens.weight.T  # tied output head


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy; ``-100`` labels (padding, document ends) are ignored."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).long(), ignore_index=IGNORE_INDEX
    )


def batch_digest(tensor: torch.Tensor) -> str:
    """A short hash of a batch, to check which batches a run saw."""
    import hashlib

    t = tensor.contiguous()
    return hashlib.blake2b(str(tuple(t.shape)).encode() + t.numpy().tobytes(), digest_size=10).hexdigest()


def learnable_batch(offset: int, *, batch: int, seq_len: int, seed: int = 0, states: int = 16) -> dict[str, torch.Tensor]:
    """Global batch ``offset`` of a stream the model can learn (so its loss visibly falls).

    Every sequence walks a fixed cycle through ``states`` token ids (next = 5 * previous + 3,
    modulo ``states``) and takes a random one of them one time in ten. Uniform random tokens
    would keep the loss at ln(vocab_size) whatever the model does.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + offset)
    walk = torch.empty(batch, seq_len + 1, dtype=torch.int64)
    walk[:, 0] = torch.randint(states, (batch,), generator=g)
    jumps = torch.rand(batch, seq_len + 1, generator=g) < 0.1
    random_ids = torch.randint(states, (batch, seq_len + 1), generator=g)
    for t in range(1, seq_len + 1):
        walk[:, t] = torch.where(jumps[:, t], random_ids[:, t], (5 * walk[:, t - 1] + 3) % states)
    return {"input_ids": walk[:, :-1].contiguous(), "labels": walk[:, 1:].contiguous()}
