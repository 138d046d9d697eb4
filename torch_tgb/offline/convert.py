"""LLMBATCH files (ZeroBatch v2) into a sealed TGB namespace: one TGB per batch, committed through a Producer.

Reading and writing the file format is ``torch_tgb.format.llmbatch``; this is
the workflow on top, which needs the producer and so stands above it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from torch_tgb.format import cast_tensor
from torch_tgb.format.llmbatch import LLMBatchReader
from torch_tgb.offline._commit import commit_batches

if TYPE_CHECKING:
    from torch_tgb.layout import Layout
    from torch_tgb.storage import ObjectStore

__all__ = ["convert_llmbatch", "llmbatch_global_batch"]


def llmbatch_global_batch(
    tokens: torch.Tensor, *, labels: bool = True, dtype: torch.dtype | None = torch.int64
) -> dict[str, torch.Tensor]:
    """The global batch of one LLMBATCH batch: ``input_ids`` and next-token ``labels`` (last = -100)."""
    ids = tokens if dtype is None else cast_tensor("input_ids", tokens, dtype)  # never a changed id
    batch = {"input_ids": ids}
    if labels:
        lab = torch.full(ids.shape, -100, dtype=torch.int64)
        lab[:, :-1] = ids[:, 1:].to(torch.int64)
        batch["labels"] = lab
    return batch


def convert_llmbatch(
    path: str | os.PathLike[str],
    ns: str | ObjectStore,
    *,
    layout: Layout,
    storage_options: Mapping[str, Any] | None = None,
    producer_id: str = "llmbatch",
    labels: bool = True,
    dtype: torch.dtype | None = torch.int64,
    commit_policy: str = "fixed:64",
    progress: bool | None = None,
) -> dict[str, Any]:
    """Turn an LLMBATCH file into a sealed TGB namespace: one TGB per batch, in file order.

    Each batch becomes ``{"input_ids": [batch_size, seq_len]}`` (int64 by
    default; ``dtype=None`` keeps uint32) plus ``labels`` (next token, -100 at
    the end of a row). Re-running after an interruption resumes at the
    producer's committed offset. Returns a JSON-able summary.
    """
    with LLMBatchReader(path) as reader:
        header = reader.header

        def make_batch(i: int) -> dict[str, torch.Tensor]:
            return llmbatch_global_batch(reader.read_batch_torch(i, None), labels=labels, dtype=dtype)

        if header.num_batches:
            layout.check_batch(make_batch(0))
        start = commit_batches(
            ns, make_batch, header.num_batches, layout=layout, producer_id=producer_id,
            storage_options=storage_options, commit_policy=commit_policy, progress=progress, desc="convert",
            metadata={"source": "llmbatch", "llmbatch_seed": header.seed, "seq_len": header.seq_len},
        )
    return {
        "batches": header.num_batches,
        "resumed_at": start,
        "batch_size": header.batch_size,
        "seq_len": header.seq_len,
        "tokens": header.num_batches * header.batch_size * header.seq_len,
    }
