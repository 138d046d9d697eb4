"""``write_dataset``: a pre-tokenised corpus -> packed, shuffled, sealed TGB namespace.

Steps, each a pure function of the inputs and the seed, so a re-run (or a
run resumed after a crash) writes the same batches:

1. documents (see :func:`as_documents`) -> rows of ``seq_len`` tokens:
   BFD packing with document masks (``packing="bfd"``) or concat-and-chunk
   (``packing="none"``);
2. rows permuted by ``shuffle_seed`` (permutation-then-partition, seed 001);
3. consecutive ``global_batch_size`` rows form global batch ``i``; the last
   one is padded with empty rows (labels ``-100``) so no token is dropped;
4. batch ``i`` is appended as producer offset ``i`` and the namespace sealed.
   A rerun resumes at the producer's committed offset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import torch

from torch_tgb.errors import LayoutError
from torch_tgb.offline._commit import commit_batches
from torch_tgb.transforms.packing import IGNORE_INDEX, pack_bfd, pack_rows
from torch_tgb.transforms.shuffle import permutation

if TYPE_CHECKING:
    from torch_tgb.layout import Layout
    from torch_tgb.storage import ObjectStore

__all__ = ["Tokens", "as_documents", "build_rows", "global_batches", "write_dataset"]

#: a list of 1-D token arrays (one per document), or ``(flat_tokens, doc_offsets)``
#: with ``doc_offsets`` of length ``num_docs + 1`` (``offsets[0] == 0``,
#: ``offsets[-1] == len(flat_tokens)``), or one 1-D array (a single document)
Tokens = Union[Sequence[Any], tuple[Any, Any], np.ndarray, torch.Tensor]

PACKINGS = ("bfd", "none")


def _array(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def as_documents(tokens: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """Normalise ``tokens`` to ``(flat int64 tokens, int64 offsets)``; document d = ``flat[off[d]:off[d+1]]``."""
    if isinstance(tokens, tuple) and len(tokens) == 2 and _array(tokens[1]).ndim == 1 and _array(tokens[0]).ndim == 1:
        flat, offsets = _array(tokens[0]), _array(tokens[1]).astype(np.int64)
        if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(flat) or (np.diff(offsets) < 0).any():
            raise ValueError("doc offsets must start at 0, be non-decreasing and end at len(tokens)")
    elif isinstance(tokens, (np.ndarray, torch.Tensor)) and _array(tokens).ndim == 1:
        flat = _array(tokens)
        offsets = np.array([0, len(flat)], dtype=np.int64)
    else:
        docs = [_array(d).reshape(-1) for d in tokens]
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    if flat.dtype.kind not in "iu":
        raise ValueError(f"token ids must be integers, got dtype {flat.dtype}")
    if flat.size and flat.min() < 0:
        raise ValueError("token ids must be >= 0")
    return flat.astype(np.int64, copy=False), offsets


def build_rows(
    flat: np.ndarray, offsets: np.ndarray, seq_len: int, *, packing: str = "bfd", pad_id: int = 0
) -> dict[str, np.ndarray]:
    """All rows of the corpus, in packing order (before the shuffle)."""
    if packing == "bfd":
        bins = pack_bfd(np.diff(offsets), seq_len)
        return pack_rows(flat, offsets, bins, seq_len, pad_id=pad_id)
    if packing == "none":
        n = -(-len(flat) // seq_len)
        ids = np.full(n * seq_len, pad_id, dtype=np.int64)
        ids[: len(flat)] = flat
        stream = np.full(n * seq_len, IGNORE_INDEX, dtype=np.int64)
        stream[: len(flat) - 1] = flat[1:]
        labels = stream.reshape(n, seq_len)
        labels[:, -1] = IGNORE_INDEX  # the next token lives in another row
        return {"input_ids": ids.reshape(n, seq_len), "labels": labels}
    raise ValueError(f"packing must be one of {PACKINGS}, got {packing!r}")


def global_batches(rows: Mapping[str, np.ndarray], global_batch_size: int, shuffle_seed: int) -> tuple[np.ndarray, int]:
    """``(row order padded with -1 to whole batches, number of batches)``: permute, then partition."""
    n = len(next(iter(rows.values())))
    order = permutation(n, shuffle_seed)
    num_batches = -(-n // global_batch_size)
    padded = np.full(num_batches * global_batch_size, -1, dtype=np.int64)
    padded[:n] = order
    return padded, num_batches


def _take(
    rows: Mapping[str, np.ndarray], index: np.ndarray, *, pad_id: int, token_dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """Rows ``index`` (``-1`` = an empty padding row) as tensors."""
    out: dict[str, torch.Tensor] = {}
    real = index >= 0
    for name, arr in rows.items():
        fill = {"input_ids": pad_id, "document_ids": -1, "position_ids": 0}.get(name, IGNORE_INDEX)
        part = np.full((len(index),) + arr.shape[1:], fill, dtype=arr.dtype)
        part[real] = arr[index[real]]
        t = torch.from_numpy(part)
        out[name] = t.to(token_dtype) if name == "input_ids" else t
    return out


def write_dataset(
    ns: str | ObjectStore,
    tokens: Tokens,
    *,
    layout: Layout,
    global_batch_size: int,
    seq_len: int,
    packing: str = "bfd",
    shuffle_seed: int = 0,
    storage_options: Mapping[str, Any] | None = None,
    producer_id: str = "offline",
    pad_id: int = 0,
    token_dtype: torch.dtype = torch.int64,
    commit_policy: str = "fixed:64",
    progress: bool | None = None,
) -> dict[str, Any]:
    """Pack, shuffle and cut ``tokens`` into global batches and commit a sealed namespace.

    ``tokens``: see :data:`Tokens`. Batches hold ``input_ids`` (``token_dtype``:
    int64, or uint32 to halve storage) and ``labels`` (int64, ``-100`` where
    there is no next token of the same document), plus ``document_ids`` and
    ``position_ids`` with ``packing="bfd"`` (for block-diagonal document
    masks). ``progress``: ``None`` shows a bar only on a terminal. Returns a
    JSON-able summary.
    """
    if global_batch_size < 1 or seq_len < 1:
        raise ValueError(f"need global_batch_size >= 1 and seq_len >= 1, got {global_batch_size=}, {seq_len=}")
    if token_dtype not in (torch.int64, torch.uint32, torch.int32):
        raise ValueError(f"token_dtype must be int64, int32 or uint32, got {token_dtype}")
    if global_batch_size % layout.dp:
        raise LayoutError(f"global_batch_size={global_batch_size} is not divisible by dp={layout.dp}")
    flat, offsets = as_documents(tokens)
    rows = build_rows(flat, offsets, seq_len, packing=packing, pad_id=pad_id)
    order, num_batches = global_batches(rows, global_batch_size, shuffle_seed)
    if num_batches:
        layout.check_batch(_take(rows, order[:global_batch_size], pad_id=pad_id, token_dtype=token_dtype))
    metadata = {"source": "write_dataset", "packing": packing, "shuffle_seed": shuffle_seed, "seq_len": seq_len}

    def make_batch(i: int) -> dict[str, torch.Tensor]:
        index = order[i * global_batch_size : (i + 1) * global_batch_size]
        return _take(rows, index, pad_id=pad_id, token_dtype=token_dtype)

    start = commit_batches(
        ns, make_batch, num_batches, layout=layout, producer_id=producer_id, storage_options=storage_options,
        metadata=metadata, commit_policy=commit_policy, progress=progress, desc="write_dataset",
    )
    n_rows = len(rows["input_ids"])
    return {
        "batches": num_batches,
        "resumed_at": start,
        "rows": n_rows,
        "padding_rows": num_batches * global_batch_size - n_rows,
        "tokens": int(len(flat)),
        "packing_efficiency": float((rows["document_ids"] >= 0).mean()) if packing == "bfd" and n_rows else None,
    }
