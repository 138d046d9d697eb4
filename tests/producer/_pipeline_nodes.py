"""Small resumable nodes for the ``produce`` tests: documents from a token file, one per row."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode


class CountingNode(BaseNode[dict[str, torch.Tensor]]):
    """Global batch ``i`` = 4 rows filled with ``i``; ``total`` batches; counts every batch read."""

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total
        self.reads: list[int] = []
        self.resets: list[dict[str, Any] | None] = []
        self._next = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.resets.append(initial_state)
        self._next = 0 if initial_state is None else int(initial_state["next"])

    def next(self) -> dict[str, torch.Tensor]:
        if self._next >= self.total:
            raise StopIteration
        i = self._next
        self.reads.append(i)
        self._next += 1
        return {"input_ids": torch.full((4, 8), i, dtype=torch.int32)}

    def get_state(self) -> dict[str, Any]:
        return {"next": self._next}


def write_corpus(path: str, num_docs: int, *, max_len: int, seed: int = 0) -> None:
    """``path.tokens.npy`` (flat uint16, ids >= 1) and ``path.offsets.npy`` (``num_docs + 1``)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, size=num_docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(1, 60000, size=int(offsets[-1]), dtype=np.uint16)
    np.save(f"{path}.tokens.npy", tokens)
    np.save(f"{path}.offsets.npy", offsets)


def corpus_documents(path: str) -> list[np.ndarray]:
    tokens = np.load(f"{path}.tokens.npy")
    offsets = np.load(f"{path}.offsets.npy")
    return [tokens[offsets[d] : offsets[d + 1]] for d in range(len(offsets) - 1)]


class DocumentRows(BaseNode[dict[str, torch.Tensor]]):
    """Documents ``shard_index, shard_index + shard_count, ...`` of a corpus, ``rows`` per global batch.

    Each document becomes one row of ``seq_len`` tokens (zero-padded; ids are
    >= 1). A short last batch is padded with all-zero rows. Every document
    read is logged as one line to ``reads_log`` (appended, flushed), so a
    test can tell which documents a killed process read.
    """

    def __init__(self, path: str, *, shard: tuple[int, int], rows: int, seq_len: int, reads_log: str | None) -> None:
        super().__init__()
        self.tokens = np.load(f"{path}.tokens.npy", mmap_mode="r")
        self.offsets = np.load(f"{path}.offsets.npy")
        self.docs = list(range(shard[0], len(self.offsets) - 1, shard[1]))
        self.rows = rows
        self.seq_len = seq_len
        self.reads_log = reads_log
        self._pos = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._pos = 0 if initial_state is None else int(initial_state["pos"])

    def next(self) -> dict[str, torch.Tensor]:
        if self._pos >= len(self.docs):
            raise StopIteration
        chosen = self.docs[self._pos : self._pos + self.rows]
        out = np.zeros((self.rows, self.seq_len), dtype=np.int32)
        for r, d in enumerate(chosen):
            doc = self.tokens[self.offsets[d] : self.offsets[d + 1]]
            out[r, : len(doc)] = doc
        if self.reads_log is not None:
            with open(self.reads_log, "a") as f:
                f.write("".join(f"{d}\n" for d in chosen))
                f.flush()
                os.fsync(f.fileno())
        self._pos += len(chosen)
        return {"input_ids": torch.from_numpy(out)}

    def get_state(self) -> dict[str, Any]:
        return {"pos": self._pos}
