"""Pack: packing over a stream of documents into fixed-length rows.

Reads ``window`` documents from its source (1-D token tensors or arrays, or
mappings holding one under ``tokens_key``, as ``sources`` nodes and ``Mix``
yield them) and packs them into rows of ``seq_len`` tokens: ``method="bfd"``
(best-fit decreasing), ``"concat"`` (sequential fill, a document split at row
ends) or ``"none"`` (concat-and-chunk: the stream cut every ``seq_len``
tokens, one sequence a row, documents not separated). A bigger window packs
tighter; no token is dropped (a document longer than ``seq_len`` is split).
Each window is packed on its own, so its last row may be padded.

Rows (``rows=``):

- ``"tokens"`` (default): each token once, at its own width
  (``transforms.token_rows``): ``input_ids`` ``[seq_len + 1]`` (the row's
  tokens, padded with ``pad_id``, and one more column) of ``token_dtype``
  (default uint32; pass uint16 for a vocabulary that fits) and ``seq_lens``, the
  int32 lengths of the sequences packed into the row (a ragged key:
  :attr:`ragged_keys`). Written with ``Layout.token_rows(dp, cp)``
  (``labels_from="input_ids"``); readers derive ``labels`` (the one-token
  shift, ``-100`` where a sequence ends; ``derive=()``: the bare shift, two
  views of the same bytes) and ``position_ids``, ``document_ids`` and
  ``cu_seqlens`` from ``seq_lens`` (``transforms.derive``).
  About ``token_dtype``'s size per token at rest, where ``"arrays"`` takes
  20-28 bytes. An id ``token_dtype`` cannot hold is an error, never wrapped.
- ``"arrays"``: the per-token arrays older namespaces store
  (``transforms.pack_rows``): ``input_ids`` (``token_dtype``, default the
  documents' dtype), ``labels``,
  ``document_ids``, ``position_ids`` ``[seq_len]`` and, with
  ``attention_metadata`` (default), ``cu_seqlens`` ``[seq_len + 1]`` and
  ``max_seqlen`` ``[1]`` (int32; see ``transforms.packing``).

Provenance (``provenance=``, on by default when the source names its
records, ``transforms.provenance``): rows also carry the ragged key
``provenance``, int64 ``[spans, 3]`` per row (unit key, record, extent) of
each piece of a record packed into it, in row order: with ``bfd``/``concat``
one per ``seq_lens`` entry, with ``"none"`` one per record piece (a row of
several records is one sequence). Documents come with their ids from the
source's bulk path (``take_documents``) or under ``DOC_PROVENANCE``.

Token rows are kept as one block per window (:class:`RowBlock`): ``next()``
hands out one row (a dict of views), :meth:`Pack.take_rows` up to ``n`` rows
at once (views of the block, no dict per row), which ``GlobalBatches`` reads
through.

State: the source's state at the start of the current window and the number
of rows of it already yielded. Packing is deterministic, so a restore
re-reads the window, packs it again and skips the rows already delivered;
no document is ever carried in the state. ``stats()`` counts rows, documents,
tokens and padding since the last reset (not part of the state).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb.datapipes.produce._steer import mix_of
from torch_tgb.errors import ProvenanceError, SchemaMismatch
from torch_tgb.lineage.sources import sources_of
from torch_tgb.format import narrowing_problem
from torch_tgb.transforms import PACKERS, pack, pack_rows
from torch_tgb.transforms.derive import SEQ_LENS_KEY
from torch_tgb.transforms.provenance import DOC_PROVENANCE, PROVENANCE_KEY, SourceInfo, span_provenance
from torch_tgb.transforms.token_rows import Spans, chunk_spans, concat_spans, spans_from_bins, token_rows

__all__ = ["METHODS", "ROW_FORMATS", "Pack", "PackStats", "RowBlock"]

#: Pack(method=): the packers, and concat-and-chunk
METHODS = (*sorted(PACKERS), "none")
#: Pack(rows=)
ROW_FORMATS = ("tokens", "arrays")
#: what a source widens unsigned token dtypes to (``sources.as_tokens``)
WIDENED = {"u2": np.int32, "u4": np.int64}
#: the dtypes of token rows: a token at its own width
TOKEN_DTYPES = (torch.uint16, torch.uint32, torch.int32, torch.int64)


@dataclass(frozen=True)
class PackStats:
    """Packing work since the last reset; exported as flat numeric fields."""

    rows: int = 0
    documents: int = 0
    #: real tokens packed (every token of every document read)
    tokens: int = 0
    #: pieces of documents that were cut at a row end (a document in k pieces counts k - 1)
    splits: int = 0
    #: tokens / (rows * seq_len) over the windows packed so far (1.0 before any)
    packing_efficiency: float = 1.0


@dataclass(frozen=True)
class RowBlock:
    """``rows`` consecutive rows: dense fields ``[rows, ...]`` and ragged fields as values plus int64 offsets.

    Ragged field ``name``'s row ``r`` is ``values[offsets[r]:offsets[r + 1]]``
    (``offsets`` numpy int64 ``[rows + 1]`` from 0).
    """

    rows: int
    dense: dict[str, torch.Tensor]
    ragged: dict[str, tuple[torch.Tensor, np.ndarray]]

    def row(self, r: int) -> dict[str, torch.Tensor]:
        """Row ``r`` as ``next()`` yields it: a dict of views."""
        out = {name: t[r] for name, t in self.dense.items()}
        for name, (values, offsets) in self.ragged.items():
            out[name] = values[int(offsets[r]) : int(offsets[r + 1])]
        return out

    def take(self, start: int, count: int) -> RowBlock:
        """Rows ``[start, start + count)`` as a block of views."""
        ragged = {}
        for name, (values, offsets) in self.ragged.items():
            a, b = int(offsets[start]), int(offsets[start + count])
            ragged[name] = (values[a:b], offsets[start : start + count + 1] - a)
        return RowBlock(count, {n: t[start : start + count] for n, t in self.dense.items()}, ragged)


class Pack(BaseNode[dict[str, torch.Tensor]]):
    """Packs documents from ``source`` into rows of ``seq_len`` tokens."""

    SOURCE_KEY = "source"
    DONE_KEY = "rows_done"

    def __init__(
        self,
        source: BaseNode[Any],
        seq_len: int,
        *,
        window: int = 256,
        pad_id: int = 0,
        method: str = "bfd",
        tokens_key: str = "tokens",
        attention_metadata: bool = True,
        rows: str = "tokens",
        token_dtype: torch.dtype | None = None,
        provenance: bool | None = None,
    ) -> None:
        super().__init__()
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1 or window < 1:
            raise ValueError(f"seq_len and window must be ints >= 1, got {seq_len=} {window=}")
        if method not in METHODS:
            raise ValueError(f"unknown packing method {method!r}; choose from {list(METHODS)}")
        if rows not in ROW_FORMATS:
            raise ValueError(f"rows must be one of {ROW_FORMATS}, got {rows!r}")
        if token_dtype is not None and token_dtype not in TOKEN_DTYPES:
            raise ValueError(f"token_dtype must be one of {TOKEN_DTYPES} or None, got {token_dtype}")
        if token_dtype is None and rows == "tokens":
            token_dtype = torch.uint32
        problem = None if token_dtype is None else narrowing_problem(torch.tensor([pad_id]), token_dtype)
        if problem is not None:
            raise ValueError(f"pad_id={pad_id}: {problem}")
        self.rows = rows
        self.token_dtype = token_dtype
        self.source = source
        self.seq_len = seq_len
        self.window = window
        self.pad_id = pad_id
        self.method = method
        self.tokens_key = tokens_key
        self.attention_metadata = attention_metadata
        found = sources_of(source)
        if provenance and found is None:
            raise ProvenanceError("Pack(provenance=True): its source names no records (a source node or a Mix of "
                                  "them does); pass provenance=None or False")
        #: whether rows carry ``provenance`` (None: when the source names its records)
        self.provenance = bool(found is not None if provenance is None else provenance)
        self._sources = found or []
        self._window_state: dict[str, Any] | None = None
        self._done = 0
        # the current window's rows not yet handed out: a block (token rows) from row _at on, or row dicts
        self._rows: deque[dict[str, torch.Tensor]] = deque()
        self._block: RowBlock | None = None
        self._at = 0
        self._counts = {"rows": 0, "documents": 0, "tokens": 0, "splits": 0}

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._rows.clear()
        self._block, self._at = None, 0
        self._counts = dict.fromkeys(self._counts, 0)
        if initial_state is None:
            self.source.reset(None)
            self._window_state = self.source.state_dict()
            self._done = 0
            return
        self.source.reset(initial_state[self.SOURCE_KEY])
        self._window_state = initial_state[self.SOURCE_KEY]
        skip = int(initial_state[self.DONE_KEY])
        self._fill()
        for _ in range(min(skip, len(self._rows))):
            self._rows.popleft()
        if self._block is not None:
            self._at = min(skip, self._block.rows)
        self._done = skip

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._window_state, self.DONE_KEY: self._done}

    def next(self) -> dict[str, torch.Tensor]:
        if not self._left() and not self._next_window():
            raise StopIteration
        self._done += 1
        if self._block is not None:
            self._at += 1
            return self._block.row(self._at - 1)
        return self._rows.popleft()

    def take_rows(self, limit: int) -> RowBlock | None:
        """Up to ``limit`` next rows at once (at most the rest of the window), as :meth:`next` would yield them.

        The same state after it as that many ``next()`` calls. None where rows
        are not kept as a block (``rows="arrays"``, ``PackSamples``), with
        nothing taken; an empty block at the end of the stream.
        """
        if self._rows:
            return None
        if not self._left() and not self._next_window():
            return RowBlock(0, {}, {})
        if self._block is None:
            return None
        count = min(limit, self._block.rows - self._at)
        out = self._block.take(self._at, count)
        self._at += count
        self._done += count
        return out

    def _left(self) -> int:
        """Rows of the current window not yet handed out."""
        return len(self._rows) + (self._block.rows - self._at if self._block is not None else 0)

    def _next_window(self) -> bool:
        """Pack the next window; False at the end of the stream."""
        self._window_state = self.source.state_dict()
        self._done = 0
        self._block, self._at = None, 0
        self._fill()
        return self._left() > 0

    @property
    def mix(self) -> Any:
        """The ``Mix`` below (None: none): ``tgb.produce`` records its control version, fleets read its stats."""
        return mix_of(self.source)

    @property
    def ragged_keys(self) -> tuple[str, ...]:
        """The ragged fields of the rows (``GlobalBatches`` passes them to the producer as ragged keys)."""
        keys = (SEQ_LENS_KEY,) if self.rows == "tokens" else ()
        return (*keys, PROVENANCE_KEY) if self.provenance else keys

    def provenance_sources(self) -> list[SourceInfo] | None:
        """The sources the rows' provenance names (None: the rows carry none)."""
        return list(self._sources) if self.provenance else None

    def stats(self) -> PackStats:
        c = self._counts
        efficiency = c["tokens"] / (c["rows"] * self.seq_len) if c["rows"] else 1.0
        return PackStats(packing_efficiency=efficiency, **c)

    def _tokens(self, doc: Any) -> np.ndarray:
        if isinstance(doc, Mapping):
            if self.tokens_key not in doc:
                raise ValueError(f"Pack: document has no {self.tokens_key!r} field (fields: {sorted(doc)})")
            doc = doc[self.tokens_key]
        if isinstance(doc, torch.Tensor):
            doc = doc.detach().cpu().numpy()
        return np.asarray(doc).reshape(-1)

    def _window_tokens(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The next window of documents as ``(flat tokens, int64 offsets, ids [n, 3] or None)``.

        Through the source's bulk path if it has one (``take_documents`` when
        provenance is on, else ``take_tokens``).
        """
        take = getattr(self.source, "take_documents" if self.provenance else "take_tokens", None)
        got = take(self.window) if take is not None else None
        if got is not None:
            return (got[0], got[1], got[2]) if self.provenance else (got[0], got[1], None)
        docs, ids = [], []
        for doc in self.source:
            docs.append(self._tokens(doc))
            if self.provenance:
                ids.append(self._doc_id(doc))
            if len(docs) >= self.window:
                break
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        tokens = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return tokens, offsets, np.asarray(ids, dtype=np.int64).reshape(-1, 3) if self.provenance else None

    def _doc_id(self, doc: Any) -> tuple[int, int, int]:
        found = doc.get(DOC_PROVENANCE) if isinstance(doc, Mapping) else None
        if found is None:
            raise ProvenanceError(f"Pack: a document without its id ({DOC_PROVENANCE!r}) while the rows carry "
                                  "provenance: every document of the source must come from a source node")
        return tuple(found)

    def _fill(self) -> None:
        tokens, offsets, ids = self._window_tokens()
        if len(offsets) < 2:
            return
        docs = range(len(offsets) - 1)
        lengths = np.diff(offsets)
        spans = self._spans(lengths)
        prov = None if ids is None else self._provenance(ids, lengths, spans)
        if self.method == "none":  # one stream: the documents are not separated
            offsets = np.array([0, len(tokens)], dtype=np.int64)
        self._counts["rows"] += spans.rows
        self._counts["documents"] += len(docs)
        self._counts["tokens"] += int(lengths.sum())
        if self.method != "none":
            self._counts["splits"] += len(spans.length) - int((lengths > 0).sum())
        if self.rows == "tokens":
            self._token_rows(tokens, offsets, spans, prov)
        else:
            self._array_rows(tokens, offsets, spans, prov)

    def _provenance(self, ids: np.ndarray, lengths: np.ndarray, spans: Spans) -> tuple[torch.Tensor, np.ndarray]:
        """The rows' provenance (values ``[spans, 3]``, row offsets) of a window whose documents have ``ids``."""
        pieces = concat_spans(lengths, self.seq_len) if self.method == "none" else spans  # a record's pieces
        values = span_provenance(ids, pieces.doc, pieces.start, pieces.length)
        counts = np.bincount(pieces.row, minlength=spans.rows) if len(pieces.row) else np.zeros(spans.rows, np.int64)
        row_first = np.zeros(spans.rows + 1, dtype=np.int64)
        np.cumsum(counts, out=row_first[1:])
        return torch.from_numpy(values), row_first

    def _spans(self, lengths: np.ndarray) -> Spans:
        if self.method == "none":
            return chunk_spans(int(lengths.sum()), self.seq_len)
        if self.method == "concat":
            return concat_spans(lengths, self.seq_len)
        return spans_from_bins(pack(lengths, self.seq_len, self.method))

    def _row_dtype(self, tokens: np.ndarray) -> np.dtype:
        """The numpy dtype of the rows' tokens; a token ``token_dtype`` cannot hold is a SchemaMismatch.

        Without ``token_dtype`` (``rows="arrays"``), the documents' dtype as a
        source yields it (uint16 widens to int32 and uint32 to int64), the same
        whether the source was read document by document or in bulk.
        """
        if self.token_dtype is None:
            return np.dtype(WIDENED.get(tokens.dtype.str.lstrip("<=|"), tokens.dtype))
        target = torch.empty(0, dtype=self.token_dtype).numpy().dtype
        if len(tokens) and not np.can_cast(tokens.dtype, target):  # narrowing: one min/max pass
            low, high, fits = int(tokens.min()), int(tokens.max()), np.iinfo(target)
            if low < fits.min or high > fits.max:
                bad = high if high > fits.max else low
                raise SchemaMismatch(f"Pack: token ids do not fit token_dtype={self.token_dtype}: a value {bad} does "
                                     f"not fit {target} ({fits.min}..{fits.max}): the cast would change it")
        return target

    def _token_rows(self, tokens: np.ndarray, offsets: np.ndarray, spans: Spans,
                    prov: tuple[torch.Tensor, np.ndarray] | None) -> None:
        dtype = self._row_dtype(tokens)
        rows, lens, row_first = token_rows(tokens, offsets, spans, self.seq_len, pad_id=self.pad_id, dtype=dtype)
        ragged = {SEQ_LENS_KEY: (torch.from_numpy(lens), row_first)}
        if prov is not None:
            ragged[PROVENANCE_KEY] = prov
        self._block = RowBlock(len(rows), {"input_ids": torch.from_numpy(rows)}, ragged)
        self._at = 0

    def _array_rows(self, tokens: np.ndarray, offsets: np.ndarray, spans: Spans,
                    prov: tuple[torch.Tensor, np.ndarray] | None) -> None:
        bins = [[] for _ in range(spans.rows)]  # type: list[list[tuple[int, int, int]]]
        for r, d, a, n in zip(spans.row.tolist(), spans.doc.tolist(), spans.start.tolist(), spans.length.tolist()):
            bins[r].append((d, a, a + n))
        rows = pack_rows(tokens, offsets, bins, self.seq_len, pad_id=self.pad_id, dtype=self._row_dtype(tokens),
                         attention_metadata=self.attention_metadata)
        for r in range(len(bins)):
            row = {name: torch.from_numpy(np.ascontiguousarray(a[r])) for name, a in rows.items()}
            if prov is not None:
                row[PROVENANCE_KEY] = prov[0][int(prov[1][r]) : int(prov[1][r + 1])]
            self._rows.append(row)
