"""Pack: packing over a stream of documents into fixed-length rows.

Reads ``window`` documents from its source (1-D token tensors or arrays, or
mappings holding one under ``tokens_key``, as ``sources`` nodes and ``Mix``
yield them), packs them with ``transforms.pack`` (``method="bfd"``:
best-fit decreasing; ``"concat"``: sequential fill, a document split at row
ends) and yields the rows one at a time as ``transforms.pack_rows`` makes
them: ``input_ids``, ``labels``, ``document_ids``, ``position_ids`` of shape
``[seq_len]`` and, with ``attention_metadata`` (default), ``cu_seqlens``
``[seq_len + 1]`` and ``max_seqlen`` ``[1]`` (int32; padded with ``seq_len``,
see ``transforms.packing``). A bigger window packs tighter; no token is
dropped: a document longer than ``seq_len`` is split. Each window is packed
on its own, so its last row may be padded (with concat too).

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

from torch_tgb.transforms import PACKERS, pack, pack_rows

__all__ = ["Pack", "PackStats"]


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
    ) -> None:
        super().__init__()
        if seq_len < 1 or window < 1:
            raise ValueError(f"seq_len and window must be >= 1, got {seq_len=} {window=}")
        if method not in PACKERS:
            raise ValueError(f"unknown packing method {method!r}; choose from {sorted(PACKERS)}")
        self.source = source
        self.seq_len = seq_len
        self.window = window
        self.pad_id = pad_id
        self.method = method
        self.tokens_key = tokens_key
        self.attention_metadata = attention_metadata
        self._window_state: dict[str, Any] | None = None
        self._done = 0
        self._rows: deque[dict[str, torch.Tensor]] = deque()
        self._counts = {"rows": 0, "documents": 0, "tokens": 0, "splits": 0}

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._rows.clear()
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
        self._done = skip

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._window_state, self.DONE_KEY: self._done}

    def next(self) -> dict[str, torch.Tensor]:
        if not self._rows:
            self._window_state = self.source.state_dict()
            self._done = 0
            self._fill()
            if not self._rows:
                raise StopIteration
        self._done += 1
        return self._rows.popleft()

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

    def _fill(self) -> None:
        docs: list[np.ndarray] = []
        for doc in self.source:
            docs.append(self._tokens(doc))
            if len(docs) >= self.window:
                break
        if not docs:
            return
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        tokens = np.concatenate(docs)
        bins = pack(lengths, self.seq_len, self.method)
        rows = pack_rows(
            tokens,
            offsets,
            bins,
            self.seq_len,
            pad_id=self.pad_id,
            dtype=tokens.dtype,
            attention_metadata=self.attention_metadata,
        )
        pieces = sum(len(row) for row in bins)
        self._counts["rows"] += len(bins)
        self._counts["documents"] += len(docs)
        self._counts["tokens"] += int(lengths.sum())
        self._counts["splits"] += pieces - int((lengths > 0).sum())
        for r in range(len(bins)):
            self._rows.append({name: torch.from_numpy(np.ascontiguousarray(a[r])) for name, a in rows.items()})
