"""``write_dataset``: a pre-tokenised corpus of any size -> packed, shuffled, sealed TGB namespace.

A streaming pipeline of resumable nodes (``offline/_stream.py``) run by
:func:`torch_tgb.produce`, so memory is bounded by the packing window and one
global batch, whatever the corpus size, and a rerun after a crash resumes
from the pipeline state committed with the producer's last offset:

1. documents: of a token array / ``(flat, offsets)`` (memory-mapped files
   are read through a mapping whose pages are dropped as it goes), in the
   order of a permutation by ``shuffle_seed``, partitioned contiguously by
   ``shard`` (permutation-then-partition, seed 001); or of a document node;
2. rows of ``seq_len`` tokens: packing with document masks over windows
   of ``packing_window`` documents (``packing="bfd"`` best-fit decreasing or
   ``"concat"``, ``datapipes.Pack``) or concat-and-chunk
   (``packing="none"``/``None``);
3. ``global_batch_size`` rows form a global batch (``datapipes.GlobalBatches``,
   optionally cost-balanced over the dp slices with ``balance="greedy"|"kk"``);
   the last one is padded with empty rows (labels ``-100``) so no token is dropped;
4. batch ``i`` is appended as producer offset ``i``; the namespace is sealed
   at the end unless ``seal=False``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb.errors import LayoutError, ManifestError
from torch_tgb.offline._stream import PACKINGS, batch_keys
from torch_tgb.transforms.packing import IGNORE_INDEX, pack, pack_rows
from torch_tgb.transforms.shuffle import permutation
from torch_tgb.transforms.tokens import offsets_problem, token_ids_problem

if TYPE_CHECKING:
    from torch_tgb.layout import Layout
    from torch_tgb.storage import ObjectStore

__all__ = ["Tokens", "as_documents", "build_rows", "write_dataset"]

#: a list of 1-D token arrays (one per document), or ``(flat_tokens, doc_offsets)``
#: with ``doc_offsets`` of length ``num_docs + 1`` (``offsets[0] == 0``,
#: ``offsets[-1] == len(flat_tokens)``), or one 1-D array (a single document);
#: ``write_dataset`` also takes a ``torchdata`` node yielding documents
Tokens = Union[Sequence[Any], tuple[Any, Any], np.ndarray, torch.Tensor, BaseNode]


def _array(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def as_documents(tokens: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """Normalise ``tokens`` to ``(flat int64 tokens, int64 offsets)``; document d = ``flat[off[d]:off[d+1]]``."""
    if isinstance(tokens, tuple) and len(tokens) == 2 and _array(tokens[1]).ndim == 1 and _array(tokens[0]).ndim == 1:
        flat, offsets = _array(tokens[0]), _checked_offsets(_array(tokens[1]), len(_array(tokens[0])))
    elif isinstance(tokens, (np.ndarray, torch.Tensor)) and _array(tokens).ndim == 1:
        flat = _array(tokens)
        offsets = np.array([0, len(flat)], dtype=np.int64)
    else:
        docs = [_array(d).reshape(-1) for d in tokens]
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    problem = token_ids_problem(flat)  # the rule every source applies too
    if problem is not None:
        raise ValueError(problem)
    return flat.astype(np.int64, copy=False), offsets


def _checked_offsets(offsets: np.ndarray, num_tokens: int) -> np.ndarray:
    """``offsets`` as int64 after the rule every source applies (``transforms.tokens.offsets_problem``)."""
    problem = offsets_problem(offsets, num_tokens, min_boundaries=1)
    if problem is not None:
        raise ValueError(f"doc {problem}")
    return offsets.astype(np.int64)


def build_rows(
    flat: np.ndarray, offsets: np.ndarray, seq_len: int, *, packing: str = "bfd", pad_id: int = 0
) -> dict[str, np.ndarray]:
    """All rows of the corpus, in packing order (before the shuffle)."""
    if packing in ("bfd", "concat"):
        bins = pack(np.diff(offsets), seq_len, packing)
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




#: documents of an array source are read in pieces of at most this many rows' worth of tokens
_PIECE_ROWS = 64


def _flat_and_offsets(tokens: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`as_documents` but without copying or widening a big flat array (memmaps stay mapped)."""
    if isinstance(tokens, tuple) and len(tokens) == 2:
        flat, offsets = tokens
        if isinstance(flat, torch.Tensor):
            flat = flat.detach().cpu().numpy()
        offsets = np.asarray(offsets.numpy() if isinstance(offsets, torch.Tensor) else offsets)
        if not isinstance(flat, np.ndarray) or flat.ndim != 1 or offsets.ndim != 1:
            raise ValueError("(tokens, doc_offsets) must be two 1-D arrays")
        offsets = _checked_offsets(offsets, len(flat))
    elif isinstance(tokens, (np.ndarray, torch.Tensor)) and tokens.ndim == 1:
        flat = tokens.detach().cpu().numpy() if isinstance(tokens, torch.Tensor) else tokens
        offsets = np.array([0, len(flat)], dtype=np.int64)
    else:
        flat, offsets = as_documents(tokens)  # a list of documents: already in memory
    if flat.dtype.kind not in "iu":
        raise ValueError(f"token ids must be integers, got dtype {flat.dtype}")
    return flat, offsets


def _documents(
    tokens: Tokens, *, shuffle_seed: int, shard: tuple[int, int] | None, piece: int
) -> tuple[BaseNode[Any], dict[str, Any]]:
    """(document node, a JSON description of what it reads: compared on reruns)."""
    from torch_tgb.offline._stream import ArrayDocuments

    if isinstance(tokens, BaseNode):
        if shard is not None:
            raise ValueError("shard= applies to token arrays; shard a document node through its own shard=")
        return tokens, {"source": type(tokens).__name__}
    index, count = shard if shard is not None else (0, 1)
    if not (isinstance(index, int) and isinstance(count, int) and 0 <= index < count):
        raise ValueError(f"shard={shard!r} must be (index, count) with 0 <= index < count")
    flat, offsets = _flat_and_offsets(tokens)
    num_docs = len(offsets) - 1
    order = permutation(num_docs, shuffle_seed)[num_docs * index // count : num_docs * (index + 1) // count]
    tokens_in = int((np.asarray(offsets[order + 1]) - np.asarray(offsets[order])).sum())
    info = {"docs": len(order), "tokens": tokens_in, "shard": [index, count], "shuffle_seed": shuffle_seed}
    return ArrayDocuments(flat, offsets, order, piece=piece), info


def _summary(state: Mapping[str, Any], *, resumed_at: int, seq_len: int, packing: str, sealed: bool) -> dict[str, Any]:
    rows, tokens = int(state["rows"]), int(state["tokens"])
    return {
        "batches": int(state["batches"]),
        "resumed_at": resumed_at,
        "rows": rows,
        "padding_rows": int(state["padding_rows"]),
        "tokens": tokens,
        "packing_efficiency": tokens / (rows * seq_len) if packing != "none" and rows else None,
        "sealed": sealed,
    }


def write_dataset(
    ns: str | ObjectStore,
    tokens: Tokens,
    *,
    layout: Layout,
    global_batch_size: int,
    seq_len: int,
    packing: str | None = "bfd",
    shuffle_seed: int = 0,
    storage_options: Mapping[str, Any] | None = None,
    producer_id: str = "offline",
    pad_id: int = 0,
    token_dtype: torch.dtype = torch.int64,
    commit_policy: str = "fixed:64",
    progress: bool | None = None,
    shard: tuple[int, int] | None = None,
    seal: bool = True,
    packing_window: int = 1024,
    balance: str | None = None,
    alpha: float = 0.0,
    attention_metadata: bool = False,
    segment_bytes: int = 64 << 20,
) -> dict[str, Any]:
    """Pack, shuffle and cut ``tokens`` into global batches and commit them to ``ns``, streaming.

    ``tokens``: see :data:`Tokens`; a memory-mapped array (``np.load(...,
    mmap_mode="r")``) is never loaded whole, and a ``torchdata`` node yielding
    documents (``{"tokens": 1-D tensor}`` or arrays, e.g. a
    ``torch_tgb.sources`` node) is read in its own order. Batches hold
    ``input_ids`` (``token_dtype``: int64, or uint32/int32 to shrink storage;
    an id the dtype cannot hold is a ``ValueError``, never wrapped)
    and ``labels`` (int64, ``-100`` where there is no next token of the same
    document), plus ``document_ids`` and ``position_ids`` with
    ``packing="bfd"`` or ``"concat"`` (block-diagonal document masks), and
    ``cu_seqlens``/``max_seqlen`` with ``attention_metadata=True`` (off by
    default, so the schema stays the four tensors). ``packing=None`` is
    ``"none"`` (concat-and-chunk). ``balance="greedy"|"kk"`` permutes the rows
    of every batch over the ``layout.dp`` slices to even out the cost
    ``Σ len² + alpha·len`` (batches then carry ``row_index`` and
    ``row_cost``; see ``datapipes.GlobalBatches``). ``tokens`` may be a
    ``datapipes.Mix`` of several document nodes. Memory: ``packing_window``
    documents plus one global batch plus one open segment, independent of the
    corpus size. ``segment_bytes``: consecutive batches share segment objects
    of about this size (64 MiB: a reader opens and maps one object per
    segment, not per step); a segment is buffered in memory until written,
    and a crash loses (and a rerun rewrites) at most the open segment.

    Several processes may write one namespace: each with its own
    ``producer_id`` and ``shard=(i, n)`` (arrays: a contiguous part of the
    ``shuffle_seed`` permutation of documents; nodes: shard the node), all
    with ``seal=False``; when all have returned, one of them seals (e.g. a
    last ``write_dataset`` call with ``seal=True`` on an empty shard, or
    ``Producer(ns, ...).close(seal=True)``). A rerun resumes from the committed
    state; a rerun of a finished, sealed write returns its summary.
    ``progress``: ``None`` shows a bar only on a terminal. Returns a
    JSON-able summary (counts over all runs of this ``producer_id``).
    """
    from torch_tgb.offline._stream import document_batches
    from torch_tgb.producer import ProducerConfig, produce

    packing = "none" if packing is None else packing
    if packing not in PACKINGS:
        raise ValueError(f"packing must be one of {PACKINGS} or None, got {packing!r}")
    if global_batch_size < 1 or seq_len < 1 or packing_window < 1:
        raise ValueError(
            f"need global_batch_size, seq_len, packing_window >= 1, got {global_batch_size=}, {seq_len=}, {packing_window=}"
        )
    if token_dtype not in (torch.int64, torch.uint32, torch.int32):
        raise ValueError(f"token_dtype must be int64, int32 or uint32, got {token_dtype}")
    if global_batch_size % layout.dp:
        raise LayoutError(f"global_batch_size={global_batch_size} is not divisible by dp={layout.dp}")
    if balance is not None and packing == "none":
        raise ValueError(f"balance={balance!r} needs packed rows: packing='bfd' or 'concat', not 'none'")
    keys = batch_keys(packing)  # cu_seqlens/max_seqlen are [B, L + 1] and [B, 1]: never cut along the sequence
    layout.check_batch({k: torch.zeros(global_batch_size, seq_len, dtype=torch.int64) for k in keys})
    docs, info = _documents(tokens, shuffle_seed=shuffle_seed, shard=shard, piece=seq_len * _PIECE_ROWS)
    info = {**info, "packing": packing, "seq_len": seq_len, "global_batch_size": global_batch_size}
    if balance is not None:  # recorded only when used, so the info of earlier writes still matches
        info.update(balance=balance, alpha=alpha)
    if attention_metadata:
        info["attention_metadata"] = True
    pipeline = document_batches(
        docs, seq_len=seq_len, global_batch_size=global_batch_size, packing=packing, layout=layout,
        balance=balance, alpha=alpha, attention_metadata=attention_metadata, pad_id=pad_id,
        token_dtype=token_dtype, packing_window=packing_window, info=info,
    )
    metadata = {"source": "write_dataset", "packing": packing, "shuffle_seed": shuffle_seed, "seq_len": seq_len}

    done = _committed_state(ns, storage_options, producer_id, info)
    if done is not None:
        state, next_offset = done
        return _summary(state, resumed_at=next_offset, seq_len=seq_len, packing=packing, sealed=True)
    report = produce(
        ns, pipeline, producer_id=producer_id, layout=layout, storage_options=storage_options,
        commit_policy=commit_policy, seal=seal, progress=progress, metadata=metadata, _desc="write_dataset",
        config=ProducerConfig.bulk(segment_bytes=segment_bytes),  # one open/map per segment for readers
        _expected_total=-(-int(info["tokens"]) // (seq_len * global_batch_size)) if "tokens" in info else None,
    )
    return _summary(pipeline.state_dict(), resumed_at=report.start_offset, seq_len=seq_len, packing=packing, sealed=seal)


def _committed_state(
    ns: str | ObjectStore, storage_options: Mapping[str, Any] | None, producer_id: str, info: Mapping[str, Any]
) -> tuple[Mapping[str, Any], int] | None:
    """(state, next_offset) if ``ns`` is sealed and this producer finished this corpus; raise if it wrote another."""
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import ObjectStore, open_store

    store = ns if isinstance(ns, ObjectStore) else open_store(ns, dict(storage_options or {}))
    try:
        head = Manifest(store).head()
    finally:
        if store is not ns:
            store.close()
    mine = head.producers.get(producer_id)
    state = None if mine is None else mine.state
    if state is not None and state.get("info") != info:
        raise ManifestError(
            f"{store.url}: producer {producer_id!r} already wrote a different corpus or settings "
            f"({state.get('info')} vs {dict(info)}); write into a new namespace or use another producer_id"
        )
    if not head.sealed:
        return None
    if mine is not None and state is not None and state.get("done"):
        return state, mine.next_offset
    raise ManifestError(
        f"{store.url}: namespace is sealed, but producer {producer_id!r} has not finished "
        f"(next_offset={None if mine is None else mine.next_offset}); write into a new namespace"
    )
