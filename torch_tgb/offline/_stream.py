"""The resumable nodes behind ``write_dataset``: documents -> rows -> global batches.

Each holds only a position in its state (never tokens), so the state a
producer commits with every offset stays a few hundred bytes:

- :class:`ArrayDocuments`: documents of a flat token array (in memory or
  memory-mapped) in a given order; state = position in that order. A
  memory-mapped file is read with ``pread`` rather than through the mapping,
  so the resident set stays bounded by the packing window instead of growing
  to the file size.
- :class:`Chunk`: concatenate documents and cut rows of ``seq_len`` tokens
  (``packing="none"``); state = the source's state before the document the
  next row starts in, plus the tokens of it already used.

:func:`document_batches` chains them (or ``datapipes.Pack``) into
``datapipes.GlobalBatches``, the one global-batch assembler, whose state
carries the counters (rows, padding rows, tokens, batches) so a resumed run
reports totals.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb.format import narrowing_problem
from torch_tgb.transforms.packing import IGNORE_INDEX
from torch_tgb.transforms.tokens import token_ids_problem

if TYPE_CHECKING:
    from torch_tgb.datapipes import GlobalBatches
    from torch_tgb.layout import Layout

__all__ = ["ArrayDocuments", "Chunk", "PACKINGS", "batch_keys", "document_batches", "narrow_tokens"]

#: ``document_batches(packing=)``: ``datapipes.Pack`` methods, or ``"none"`` (:class:`Chunk`)
PACKINGS = ("bfd", "concat", "none")


class _Tokens:
    """``tokens[start:stop]`` as a fresh array; a file-backed memmap is read with ``pread``.

    Slicing a memory map would leave every page it touched (and the pages the
    kernel maps around each fault) in this process's resident set, so a pass
    over a file-backed corpus would grow the RSS to the file's size.
    """

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        self.dtype = arr.dtype
        filename = getattr(arr, "filename", None)
        self._fd: int | None = None
        mapping = getattr(arr, "_mmap", None)
        if isinstance(arr, np.memmap) and filename and mapping is not None and arr.ndim == 1 and arr.flags.c_contiguous:
            # where arr starts in the file: the mapping starts at offset rounded down to the
            # allocation granularity; a slice of a memmap keeps its parent's ``offset``
            mapped_at = int(arr.offset) - int(arr.offset) % mmap.ALLOCATIONGRANULARITY
            map_address = np.frombuffer(mapping, dtype=np.uint8, count=1).ctypes.data
            self._base = mapped_at + arr.ctypes.data - map_address
            self._fd = os.open(filename, os.O_RDONLY)
        self._filename = filename

    def __getitem__(self, span: slice) -> np.ndarray:
        if self._fd is None:
            return np.array(self.arr[span])
        start, stop = int(span.start), int(span.stop)
        size = self.dtype.itemsize
        want = (stop - start) * size
        data = os.pread(self._fd, want, self._base + start * size)
        if len(data) != want:
            raise OSError(f"short read of tokens [{start}, {stop}) from {self._filename}: {len(data)} bytes")
        return np.frombuffer(data, dtype=self.dtype).copy()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()


class ArrayDocuments(BaseNode[np.ndarray]):
    """Document ``order[k]`` of ``flat``/``offsets`` at position ``k``; yields 1-D integer arrays.

    A document longer than ``piece`` tokens is yielded in pieces of ``piece``
    tokens (the last shorter): with ``piece`` a multiple of ``seq_len`` that
    changes neither BFD packing (it cuts at multiples of ``seq_len`` anyway)
    nor concatenation, and keeps one huge document from being held whole.
    """

    POS_KEY = "pos"
    AT_KEY = "at"

    def __init__(
        self,
        flat: np.ndarray,
        offsets: np.ndarray,
        order: np.ndarray | None = None,
        *,
        piece: int,
    ) -> None:
        super().__init__()
        if piece < 1:
            raise ValueError(f"piece must be >= 1, got {piece}")
        self.flat = _Tokens(flat)
        self.offsets = offsets
        self.order = order
        self.piece = piece
        self._pos = 0
        self._at = 0

    def __len__(self) -> int:
        return len(self.offsets) - 1 if self.order is None else len(self.order)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {}
        self._pos = int(state.get(self.POS_KEY, 0))
        self._at = int(state.get(self.AT_KEY, 0))

    def get_state(self) -> dict[str, Any]:
        return {self.POS_KEY: self._pos, self.AT_KEY: self._at}

    def next(self) -> np.ndarray:
        if self._pos >= len(self):
            raise StopIteration
        d = self._pos if self.order is None else int(self.order[self._pos])
        start, end = int(self.offsets[d]) + self._at, int(self.offsets[d + 1])
        stop = min(end, start + self.piece)
        doc = self.flat[start:stop]
        problem = token_ids_problem(doc)  # the rule every source applies too
        if problem is not None:
            raise ValueError(f"document {d}: {problem}")
        if stop == end:
            self._pos, self._at = self._pos + 1, 0
        else:
            self._at += stop - start
        return doc


class Chunk(BaseNode[dict[str, torch.Tensor]]):
    """Concatenate the documents of ``source`` and cut rows of ``seq_len`` tokens.

    Rows hold ``input_ids``, ``labels`` (the next token of the concatenated
    stream: documents are not separated; ``-100`` in the last column, whose
    next token lives in another row, and past the end) and ``document_ids``
    (0 on every real token, ``-1`` on padding: the row is one sequence). The
    last row is padded with ``pad_id``.
    """

    SOURCE_KEY = "source"
    SKIP_KEY = "skip"

    def __init__(self, source: BaseNode[Any], seq_len: int, *, pad_id: int = 0, token_dtype: torch.dtype) -> None:
        super().__init__()
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len must be an int >= 1, got {seq_len!r}")  # 0 would yield nothing, silently
        self.source = source
        self.seq_len = seq_len
        self.pad_id = pad_id
        self.token_dtype = token_dtype
        self._docs: list[tuple[dict[str, Any], np.ndarray]] = []  # (source state before it, tokens)
        self._skip = 0  # tokens of _docs[0] already in earlier rows
        self._start_state: dict[str, Any] | None = None  # source state before _docs[0] (or now, if none)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._docs = []
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])
        self._start_state = self.source.state_dict()
        self._skip = 0 if initial_state is None else int(initial_state[self.SKIP_KEY])

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self._start_state, self.SKIP_KEY: self._skip}

    def _buffered(self) -> int:
        return sum(len(d) for _, d in self._docs) - self._skip

    def next(self) -> dict[str, torch.Tensor]:
        while self._buffered() < self.seq_len:
            before = self.source.state_dict()
            try:
                doc = next(self.source)
            except StopIteration:
                break
            self._docs.append((before, np.asarray(doc).reshape(-1)))
        have = self._buffered()
        if have <= 0:
            raise StopIteration
        take = min(have, self.seq_len)
        parts, need = [], take
        while need:
            _, doc = self._docs[0]
            piece = doc[self._skip : self._skip + need]
            parts.append(piece)
            need -= len(piece)
            self._skip += len(piece)
            if self._skip == len(doc):
                self._docs.pop(0)
                self._skip = 0
        self._start_state = self._docs[0][0] if self._docs else self.source.state_dict()
        ids = np.full(self.seq_len, self.pad_id, dtype=np.int64)
        ids[:take] = np.concatenate(parts)
        labels = np.full(self.seq_len, IGNORE_INDEX, dtype=np.int64)
        labels[: take - 1] = ids[1:take]
        # the token after this row's last one is the next row's first: not in this row
        labels[-1] = IGNORE_INDEX
        document_ids = torch.full((self.seq_len,), -1, dtype=torch.int32)
        document_ids[:take] = 0
        return {
            "input_ids": narrow_tokens(torch.from_numpy(ids), self.token_dtype),
            "labels": torch.from_numpy(labels),
            "document_ids": document_ids,
        }


def narrow_tokens(ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``ids`` cast to the stored ``token_dtype``; ``ValueError`` if the cast would change an id.

    int32 storage of ids >= 2**31 would wrap them to negatives while ``labels``
    (int64) keep the real ids: refused, as the reader refuses such a cast.
    """
    problem = narrowing_problem(ids, dtype)
    if problem is not None:
        raise ValueError(f"input_ids as token_dtype={dtype}: {problem}; store them as int64 (or uint32)")
    return ids.to(dtype)


def document_batches(
    docs: BaseNode[Any],
    *,
    seq_len: int,
    global_batch_size: int,
    packing: str | None = "bfd",
    layout: Layout | None = None,
    balance: str | None = None,
    alpha: float = 0.0,
    attention_metadata: bool = False,
    pad_id: int = 0,
    token_dtype: torch.dtype = torch.int64,
    packing_window: int = 1024,
    info: Mapping[str, Any] | None = None,
) -> GlobalBatches:
    """Documents (1-D token arrays/tensors, or ``{"tokens": ...}`` dicts) -> rows -> global batches.

    ``packing="bfd"``/``"concat"``: :class:`~torch_tgb.datapipes.Pack` with
    that method over windows of ``packing_window`` documents (rows carry
    ``input_ids``, ``labels``, ``document_ids``, ``position_ids`` and, with
    ``attention_metadata``, ``cu_seqlens``/``max_seqlen``); ``"none"`` (or
    ``None``): :class:`Chunk` (``input_ids``, ``labels``). The rows go through
    :class:`~torch_tgb.datapipes.GlobalBatches` (``layout``: its dp slices,
    default ``Layout(dp=1)``; ``balance``: ``None``, ``"greedy"`` or ``"kk"``
    with cost ``Σ len² + alpha·len`` per row, which needs packed rows).
    ``docs`` may be a ``datapipes.Mix`` of several sources.
    """
    from torchdata.nodes import Mapper

    from torch_tgb.datapipes import GlobalBatches, Pack
    from torch_tgb.layout import Layout

    packing = "none" if packing is None else packing
    if packing not in PACKINGS:
        raise ValueError(f"packing must be one of {PACKINGS} or None, got {packing!r}")
    for name, value in (("seq_len", seq_len), ("global_batch_size", global_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # at the stage: 0 yields nothing
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if balance is not None and packing == "none":
        raise ValueError(f"balance={balance!r} needs packed rows (packing 'bfd' or 'concat'): "
                         "concat-and-chunk rows are one sequence each and all cost the same")
    tokens = Mapper(docs, _doc_tokens)
    rows: BaseNode[dict[str, torch.Tensor]]
    keys: tuple[str, ...] = ("input_ids", "labels")
    if packing == "none":
        rows = Chunk(tokens, seq_len, pad_id=pad_id, token_dtype=token_dtype)
    else:
        pack = Pack(tokens, seq_len, window=packing_window, pad_id=pad_id, method=packing,
                    attention_metadata=attention_metadata)
        rows = Mapper(pack, lambda r: {**r, "input_ids": narrow_tokens(r["input_ids"], token_dtype)})
        keys = batch_keys(packing, attention_metadata=attention_metadata)
    return GlobalBatches(
        rows, global_batch_size=global_batch_size, layout=layout or Layout(dp=1), balance=balance, alpha=alpha,
        pad_id=pad_id, keys=keys, info=info,
    )


def batch_keys(packing: str | None, *, attention_metadata: bool = False) -> tuple[str, ...]:
    """The row fields of :func:`document_batches` batches (before ``row_index``/``row_cost`` of balancing)."""
    if packing in (None, "none"):
        return ("input_ids", "labels")
    keys = ("input_ids", "labels", "document_ids", "position_ids")
    return keys + ("cu_seqlens", "max_seqlen") if attention_metadata else keys


def _doc_tokens(doc: Any) -> Any:
    """A source's document (``{"tokens": ...}`` or the tokens themselves) -> its tokens."""
    return doc["tokens"] if isinstance(doc, Mapping) else doc
