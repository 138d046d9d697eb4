"""Pack: best-fit-decreasing packing over a stream of documents.

Reads ``window`` documents (1-D token tensors or arrays) from its source,
packs them with ``transforms.pack_bfd`` into rows of ``seq_len`` tokens and
yields the rows one at a time as ``transforms.pack_rows`` makes them
(``input_ids``, ``labels``, ``document_ids``, ``position_ids`` tensors of
shape ``[seq_len]``). A bigger window packs tighter; no token is dropped.

State: the source's state at the start of the current window and the number
of rows of it already yielded. Packing is deterministic, so a restore
re-reads the window, packs it again and skips the rows already delivered;
no document is ever carried in the state.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb.transforms import pack_bfd, pack_rows

__all__ = ["Pack"]


class Pack(BaseNode[dict[str, torch.Tensor]]):
    """Packs documents from ``source`` into rows of ``seq_len`` tokens."""

    SOURCE_KEY = "source"
    DONE_KEY = "rows_done"

    def __init__(self, source: BaseNode[Any], seq_len: int, *, window: int = 256, pad_id: int = 0) -> None:
        super().__init__()
        if seq_len < 1 or window < 1:
            raise ValueError(f"seq_len and window must be >= 1, got {seq_len=} {window=}")
        self.source = source
        self.seq_len = seq_len
        self.window = window
        self.pad_id = pad_id
        self._window_state: dict[str, Any] | None = None
        self._done = 0
        self._rows: deque[dict[str, torch.Tensor]] = deque()

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._rows.clear()
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

    def _fill(self) -> None:
        docs: list[np.ndarray] = []
        for doc in self.source:
            docs.append(np.asarray(doc).reshape(-1))
            if len(docs) >= self.window:
                break
        if not docs:
            return
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        tokens = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
        bins = pack_bfd(lengths, self.seq_len)
        rows = pack_rows(tokens, offsets, bins, self.seq_len, pad_id=self.pad_id, dtype=tokens.dtype)
        for r in range(len(bins)):
            self._rows.append({name: torch.from_numpy(np.ascontiguousarray(a[r])) for name, a in rows.items()})
