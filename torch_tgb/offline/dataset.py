"""``write_dataset``: a pre-tokenised corpus of any size -> packed, shuffled, sealed TGB namespace.

The producer's own stages run by :func:`torch_tgb.produce`, so memory is
bounded by the packing window and one global batch, whatever the corpus
size, and a rerun after a crash resumes from the pipeline state committed with
the producer's last offset:

1. documents: ``sources.TokenFile`` over a token array / ``(flat, offsets)``
   (a memory-mapped file is read with ``pread``, never mapped whole), in the
   order of a permutation by ``shuffle_seed``, partitioned contiguously by
   ``shard`` (permutation-then-partition, seed 001); or of a document node;
2. rows of ``seq_len`` tokens (``datapipes.Pack`` through
   ``datapipes.document_batches``): packing with document boundaries over
   windows of ``packing_window`` documents (``packing="bfd"`` best-fit
   decreasing or ``"concat"``) or concat-and-chunk (``packing="none"``/``None``);
   by default token-efficient rows: each token once at the narrowest width
   that holds the vocabulary (uint16 for a 16-bit corpus, else uint32), the
   rows' ``seq_lens``, labels derived by readers;
3. ``global_batch_size`` rows form a global batch (``datapipes.GlobalBatches``,
   optionally cost-balanced over the dp slices with ``balance="greedy"|"kk"``);
   the last one is padded with empty rows (labels ``-100``) so no token is dropped;
4. batch ``i`` is appended as producer offset ``i``; the namespace is sealed
   at the end unless ``seal=False``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import numpy.typing as npt
import torch
from torchdata.nodes import BaseNode
from typing_extensions import Unpack

from torch_tgb.datapipes.produce.batches import Batching, BatchingSettings, document_batches, token_dtype_for
from torch_tgb.datapipes.produce.pack import METHODS
from torch_tgb.errors import LayoutError, ManifestError
from torch_tgb.producer.config import ProducerConfig
from torch_tgb.producer.options import ProduceOptions, ProduceSettings
from torch_tgb.transforms.packing import IGNORE_INDEX, pack, pack_rows
from torch_tgb.transforms.partition import shard_assignment
from torch_tgb.transforms.tokens import offsets_problem, token_ids_problem

from torch_tgb.producer.pipeline import produce

if TYPE_CHECKING:
    from torch_tgb.layout import Layout
    from torch_tgb.storage import ObjectStore

__all__ = ["Tokens", "as_documents", "build_rows", "write_dataset"]

#: a list of 1-D token arrays (one per document), or ``(flat_tokens, doc_offsets)``
#: with ``doc_offsets`` of length ``num_docs + 1`` (``offsets[0] == 0``,
#: ``offsets[-1] == len(flat_tokens)``), or one 1-D array (a single document);
#: ``write_dataset`` also takes a ``torchdata`` node yielding documents
Tokens = Union[Sequence[Any], tuple[Any, Any], np.ndarray, torch.Tensor, BaseNode]


def _array(x: npt.ArrayLike | torch.Tensor) -> np.ndarray:
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
    raise ValueError(f"packing must be one of {list(METHODS)}, got {packing!r}")




class WriteSettings(BatchingSettings, ProduceSettings, total=False):
    """``write_dataset``'s keywords: the fields of ``Batching`` and of ``ProduceOptions``."""


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
) -> tuple[BaseNode[Any], dict[str, Any], np.dtype | None]:
    """(document node, a JSON description of what it reads: compared on reruns, the stored tokens' dtype)."""
    from torch_tgb.sources import TokenFile

    if isinstance(tokens, BaseNode):
        if shard is not None:
            raise ValueError("shard= applies to token arrays; shard a document node through its own shard=")
        return tokens, {"source": type(tokens).__name__}, getattr(tokens, "token_dtype", None)
    index, count = shard if shard is not None else (0, 1)
    if not (isinstance(index, int) and isinstance(count, int) and 0 <= index < count):
        raise ValueError(f"shard={shard!r} must be (index, count) with 0 <= index < count")
    flat, offsets = _flat_and_offsets(tokens)
    docs = shard_assignment(len(offsets) - 1, shard_index=index, shard_count=count, seed=shuffle_seed, epoch=0)
    tokens_in = int((np.asarray(offsets[docs + 1]) - np.asarray(offsets[docs])).sum())
    info = {"docs": len(docs), "tokens": tokens_in, "shard": [index, count], "shuffle_seed": shuffle_seed}
    source = TokenFile(flat, offsets=offsets, seed=shuffle_seed, shard=(index, count), piece_tokens=piece)
    return source, info, flat.dtype


def _token_dtype(batching: Batching, stored: np.dtype | None) -> Batching:
    """``batching`` with a token dtype: as given, else the narrowest that holds the stored ids (uint16 or uint32)."""
    if batching.token_dtype is not None or batching.rows != "tokens":
        return batching
    return dataclasses.replace(batching, token_dtype=token_dtype_for(stored))


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
    batching: Batching | None = None,
    shuffle_seed: int = 0,
    shard: tuple[int, int] | None = None,
    producer_id: str = "offline",
    storage_options: Mapping[str, Any] | None = None,
    options: ProduceOptions | None = None,
    segment_bytes: int | None = None,
    **settings: Unpack[WriteSettings],
) -> dict[str, Any]:
    """Pack, shuffle and cut ``tokens`` into global batches and commit them to ``ns``, streaming.

    ``tokens``: see :data:`Tokens`; a memory-mapped array (``np.load(...,
    mmap_mode="r")``) is never loaded whole, and a ``torchdata`` node yielding
    documents (``{"tokens": 1-D tensor}`` or arrays, e.g. a
    ``torch_tgb.sources`` node) is read in its own order. How documents become
    batches is a :class:`~torch_tgb.datapipes.Batching` (``batching=``, or its
    fields as keywords: ``seq_len``, ``global_batch_size``, ``packing``,
    ``rows``, ``token_dtype``, ``pad_id``, ``packing_window``, ``balance``,
    ``alpha``, ``attention_metadata``); ``layout`` says how a batch is cut (its
    dp, cp and cp order: the keys are the rows'). By default rows are
    token-efficient: ``input_ids`` at the corpus's width (uint16 for a 16-bit
    corpus, else uint32; an id that does not fit is an error) with the token
    after each row, and ``seq_lens``; readers deliver ``input_ids`` and
    ``labels`` (-100 where a document ends) and derive the rest.
    ``rows="arrays"`` stores the per-token arrays of older namespaces
    (``input_ids``, ``labels``, ``document_ids``, ``position_ids``).

    How the producer commits is a :class:`~torch_tgb.producer.ProduceOptions`
    (``options=``, or its fields as keywords: ``commit_policy`` (default
    ``"fixed:64"``), ``progress``, ``seal`` (default True), ``config``); its
    ``config`` defaults to 32 MiB segment objects (a reader opens and maps one
    object per segment, not per step; a crash loses, and a rerun rewrites, at
    most the open segment; one is published in the background while the next
    fills: a local directory takes each TGB straight into the segment's file,
    other stores hold up to two open segments, about 64 MiB, in memory).
    ``segment_bytes=`` is the older spelling of
    ``config=ProducerConfig.bulk(segment_bytes=...)``.

    Several processes may write one namespace: each with its own
    ``producer_id`` and ``shard=(i, n)`` (arrays: a contiguous part of the
    ``shuffle_seed`` permutation of documents; nodes: shard the node), all
    with ``seal=False``; when all have returned, one of them seals (e.g. a
    last ``write_dataset`` call with ``seal=True`` on an empty shard, or
    ``Producer(ns, ...).close(seal=True)``). A rerun resumes from the committed
    state; a rerun of a finished, sealed write returns its summary. Returns a
    JSON-able summary (counts over all runs of this ``producer_id``).
    """
    batch_settings: dict[str, Any] = {k: v for k, v in settings.items() if k in Batching.__dataclass_fields__}
    produce_settings = {k: v for k, v in settings.items() if k not in batch_settings}
    if batching is None:
        missing = [k for k in ("seq_len", "global_batch_size") if k not in batch_settings]
        if missing:
            raise TypeError(f"write_dataset needs {missing} (or batching=Batching(...))")
        batching = Batching(**batch_settings)  # type: ignore[arg-type]
    else:
        batching = batching.with_settings(batch_settings)
    o = ProduceOptions(commit_policy="fixed:64", seal=True, config=ProducerConfig.bulk(32 << 20))
    o = (options or o).with_settings(produce_settings)
    if segment_bytes is not None:
        warnings.warn("write_dataset(segment_bytes=) is deprecated: pass config=ProducerConfig.bulk(segment_bytes=...)",
                      DeprecationWarning, stacklevel=2)
        o = dataclasses.replace(o, config=ProducerConfig.bulk(segment_bytes=segment_bytes))
    if batching.global_batch_size % layout.dp:
        raise LayoutError(f"global_batch_size={batching.global_batch_size} is not divisible by dp={layout.dp}")
    written = batching.for_layout(layout)
    width = batching.seq_len + (1 if batching.rows == "tokens" else 0)
    written.check_batch({k: torch.zeros(batching.global_batch_size, width, dtype=torch.int64) for k in written.seq_keys})
    docs, info, stored = _documents(tokens, shuffle_seed=shuffle_seed, shard=shard, piece=batching.seq_len * _PIECE_ROWS)
    batching = _token_dtype(batching, stored)
    packing = str(batching.packing)
    info = {**info, "packing": packing, "seq_len": batching.seq_len, "global_batch_size": batching.global_batch_size,
            "rows": batching.rows}
    if batching.balance is not None:  # recorded only when used, so the info of earlier writes still matches
        info.update(balance=batching.balance, alpha=batching.alpha)
    if batching.attention_metadata:
        info["attention_metadata"] = True
    pipeline = document_batches(docs, batching, layout=written, info=info)
    metadata = {"source": "write_dataset", "packing": packing, "shuffle_seed": shuffle_seed,
                "seq_len": batching.seq_len, **dict(o.metadata)}

    done = _committed_state(ns, storage_options, producer_id, info)
    if done is not None:
        state, next_offset = done
        return _summary(state, resumed_at=next_offset, seq_len=batching.seq_len, packing=packing, sealed=True)
    per_batch = batching.seq_len * batching.global_batch_size
    o = dataclasses.replace(o, metadata=metadata, label=o.label or "write_dataset",
                            expected_batches=-(-int(info["tokens"]) // per_batch) if "tokens" in info else None)
    report = produce(ns, pipeline, producer_id=producer_id, layout=written, storage_options=storage_options, options=o)
    return _summary(pipeline.state_dict(), resumed_at=report.start_offset, seq_len=batching.seq_len, packing=packing,
                    sealed=bool(o.seal))


def _committed_state(
    ns: str | ObjectStore, storage_options: Mapping[str, Any] | None, producer_id: str, info: Mapping[str, Any]
) -> tuple[Mapping[str, Any], int] | None:
    """(state, next_offset) if ``ns`` is sealed and this producer finished this corpus; raise if it wrote another."""
    from torch_tgb.manifest import Manifest
    from torch_tgb.storage import ObjectStore, open_store

    store = ns if isinstance(ns, ObjectStore) else open_store(ns, dict(storage_options or {}))
    try:
        manifest = Manifest(store)
        head = manifest.head()
        mine = head.producers.get(producer_id)
        state = manifest.pipeline_state(producer_id, mine)  # a large one lives in its own object
    finally:
        if store is not ns:
            store.close()
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
