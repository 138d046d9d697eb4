"""TokenFile: a flat token array, on local disk (memory-mapped) or in memory, cut into documents.

Inputs (``path``): a file, or an array already at hand (a numpy array, a
``np.memmap``/``np.load(mmap_mode="r")``, a 1-D tensor). Files:

- ``.npy``: a 1-D array of uint16, int32, uint32 or int64 tokens (dtype read
  from the header; ``dtype=`` given too must agree).
- ``.bin`` (any other suffix): raw little-endian tokens, no header; ``dtype=``
  is required and the size must be a multiple of its item size.
- offsets (``offsets=``: an array, or the path of a ``.npy`` array or of a raw
  file of little-endian int64 boundaries, e.g. ``corpus.idx`` written with
  ``np.asarray(offsets, dtype="<i8").tofile(...)``): ``offsets[0] == 0``,
  non-decreasing, ``offsets[-1] ==`` the token count; document k is
  ``tokens[offsets[k]:offsets[k+1]]``. (Megatron's binary ``.idx``, with its
  ``MMIDIDX`` header, is refused with that explanation.) Without offsets the
  file is cut into documents of ``chunk_tokens`` tokens (the last one shorter).

``piece_tokens``: a document longer than that is yielded in pieces of at most
``piece_tokens`` tokens, in order (records of its unit, so a restore resumes
inside it): a packer cuts long documents at multiples of ``seq_len`` anyway,
and no document is ever held whole. A file-backed array is read with
``pread`` rather than through the mapping, so the process's resident set
stays bounded by what is in flight instead of growing to the file's size.

Units of sharding are groups of ``docs_per_unit`` consecutive documents (1 by
default: every epoch is a full permutation of the documents). Both files are
opened with ``np.memmap``/``np.load(mmap_mode="r")``; nothing is loaded whole
and each document is copied out as it is yielded.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import Document, ReadOptions, UnitSource
from torch_tgb.sources._inputs import TOKEN_DTYPES, as_tokens
from torch_tgb.sources._bulk import Taken, take_all_or_nothing
from torch_tgb.sources._token_reader import TokenReader
from torch_tgb.transforms.provenance import doc_ids
from torch_tgb.transforms.tokens import offsets_problem, token_ids_problem

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["TokenFile"]

_MEGATRON_MAGIC = b"MMIDIDX\x00\x00"


class TokenFile(UnitSource):
    """Documents of a memory-mapped token file (see the module docstring for the formats).

    ``**options`` are the ``ReadOptions`` every source takes: ``shard``, ``seed``,
    ``epoch``, ``epochs``, ``shuffle_buffer``, ``on_error``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | np.ndarray | torch.Tensor,
        *,
        offsets: str | os.PathLike[str] | npt.ArrayLike | None = None,
        dtype: npt.DTypeLike | None = None,
        chunk_tokens: int = 2048,
        docs_per_unit: int = 1,
        piece_tokens: int | None = None,
        **options: Unpack[ReadOptions],
    ) -> None:
        super().__init__(**options)
        if chunk_tokens < 1 or docs_per_unit < 1 or (piece_tokens is not None and piece_tokens < 1):
            raise ValueError(f"chunk_tokens, docs_per_unit and piece_tokens must be >= 1, got {chunk_tokens=} "
                             f"{docs_per_unit=} {piece_tokens=}")
        self._array = _as_array(path) if isinstance(path, (np.ndarray, torch.Tensor)) else None
        self.path = f"<array of {len(self._array)} tokens>" if self._array is not None else os.fspath(path)  # type: ignore[arg-type]
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.chunk_tokens = chunk_tokens
        self.docs_per_unit = docs_per_unit
        self.piece_tokens = piece_tokens
        self._offsets_arg = offsets if offsets is None or isinstance(offsets, (str, os.PathLike)) else np.asarray(offsets)
        self._handles: dict[str, Any] = {}
        #: (epoch, position, tokens ahead of the reads) up to which the bulk path asked the kernel to read ahead
        self._advised = (-1, 0, 0)
        #: a corpus small next to the read-ahead budget is advised by whole blocks: (epoch, blocks advised)
        self._blocks: tuple[int, np.ndarray] | None = None
        tokens = self._tokens()
        bounds = self._bounds()
        if bounds is not None:
            self.num_docs = len(bounds) - 1
            _check_offsets(bounds, len(tokens), self._offsets_name())
        else:
            self.num_docs = -(-len(tokens) // chunk_tokens)
        self._set_num_units(-(-self.num_docs // docs_per_unit), self.path)
        if self.num_units > LARGE_ORDER_UNITS:
            fits = 1 << max(0, (-(-self.num_docs // LARGE_ORDER_UNITS) - 1).bit_length())  # a power of two
            warnings.warn(
                f"{self.path}: {self.num_units:,} units of {docs_per_unit} document(s): every epoch's order is a "
                f"permutation of them that each producer builds whole in memory ({self.num_units * 8 / 2**30:.1f} "
                f"GiB, about 7-9 s per 10^8 units on one core); docs_per_unit={fits} keeps it under "
                f"{LARGE_ORDER_UNITS * 8 / 2**30:.0f} GiB (the documents of a unit are read in file order)",
                stacklevel=2,
            )

    @property
    def token_dtype(self) -> np.dtype:
        """The dtype of the stored tokens (what a packer may keep them at)."""
        return self._tokens().dtype

    def _offsets_name(self) -> str:
        arg = self._offsets_arg
        return os.fspath(arg) if isinstance(arg, (str, os.PathLike)) else f"offsets of {self.path}"

    def _tokens(self) -> TokenReader:
        if "tokens" not in self._handles:
            array = self._array if self._array is not None else _open_tokens(self.path, self.dtype)
            self._handles["tokens"] = TokenReader(array, self.path)
        reader: TokenReader = self._handles["tokens"]
        return reader

    def _bounds(self) -> np.ndarray | None:
        arg = self._offsets_arg
        if arg is None:
            return None
        if isinstance(arg, np.ndarray):
            return arg
        if "offsets" not in self._handles:
            self._handles["offsets"] = _open_offsets(os.fspath(arg))
        return self._handles["offsets"]

    def _unit_name(self, unit: int) -> str:
        return f"{self.path} (documents {unit * self.docs_per_unit}..)"

    def _provenance_units(self) -> list[str]:
        return [self.path]  # one unit: the file; a record is a document of it

    def _default_name(self) -> str:
        return "tokens" if self._array is not None else (os.path.basename(self.path) or "tokens")

    def _record_id(self, unit: int, index: int) -> tuple[int, int, int]:
        """Record ``index`` of walker unit ``unit`` is a document of the file (or a piece of one)."""
        first = unit * self.docs_per_unit
        if self.piece_tokens is None:
            return 0, first + index, 0
        for doc in range(first, min(first + self.docs_per_unit, self.num_docs)):
            pieces = self._pieces(doc)
            if index < pieces:
                return 0, doc, index * self.piece_tokens
            index -= pieces
        raise IndexError(f"{self._unit_name(unit)}: no record {index}")

    def take_tokens(self, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`take_documents` without the documents' ids."""
        taken = self.take_documents(limit)
        return None if taken is None else (taken[0], taken[1])

    def take_documents(self, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Up to ``limit`` next documents at once, as ``(flat tokens at their stored dtype, int64 offsets, ids)``
        (``ids``: ``[n, 3]``, ``transforms.provenance.doc_ids``).

        What ``limit`` calls of ``next()`` would yield, and the same state after
        it, without a tensor, a dict or a node call per document: the bulk path
        a packer reads through (``datapipes.Pack``). Several documents per unit
        are read as one span per unit (the unit's documents are adjacent in the
        file). None where it does not apply (a shuffle window, errors skipped,
        a document longer than ``piece_tokens``, or a position inside one): the
        caller then iterates. ``(empty, [0])`` at the end of the stream. A
        read that fails raises with the position where it was (nothing taken).
        """
        if self.shuffle_buffer or self.on_error != "raise" or not self._between_windows():
            return None
        if self._it is not None:  # inside a document read in pieces
            return None
        self._after_fork()
        return take_all_or_nothing(self, lambda: self._take_spans(limit), self._tokens().dtype)

    def _take_spans(self, limit: int) -> Taken | None:
        """:meth:`take_tokens`' walk: tokens, lengths and ids read, the position past them; None: not for the bulk path."""
        flats: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        ids: list[np.ndarray] = []
        need = limit
        while need > 0 and self._ensure_unit():  # across an epoch's end, as next() reads
            docs, units, pos, record = self._next_docs(need)
            starts, stops = self._spans(docs)
            self._read_ahead(units, int((stops - starts).sum()))
            if self.piece_tokens is not None and bool((stops - starts > self.piece_tokens).any()):
                return None  # a document read in pieces: the per-record path
            flat = self._read_spans(starts, stops)
            if token_ids_problem(flat) is not None:  # the rule every source applies (one pass)
                return None  # the per-document path names the document (and applies on_error)
            flats.append(flat)
            counts.append(stops - starts)
            ids.append(doc_ids(self._unit_key(0), docs))
            self._pos, self._window_start = pos, record
            need -= len(docs)
        return flats, counts, ids

    def _next_docs(self, need: int) -> tuple[np.ndarray, int, int, int]:
        """The next documents of this epoch, at most ``need``: ``(documents, units touched, position, record after)``.

        From record ``_window_start`` of the unit at ``_pos``: the rest of that
        unit, then whole units, the last one possibly in part.
        """
        order = self._assignment()
        k = self.docs_per_unit
        if k == 1:
            units = np.asarray(order[self._pos : self._pos + need], dtype=np.int64)
            return units, len(units), self._pos + len(units), 0
        parts: list[np.ndarray] = []
        pos, record, taken = self._pos, self._window_start, 0
        while taken < need and pos < len(order):
            first = int(order[pos]) * k
            docs = np.arange(first + record, min(first + k, self.num_docs), dtype=np.int64)[: need - taken]
            parts.append(docs)
            taken += len(docs)
            record += len(docs)
            if first + record >= min(first + k, self.num_docs):  # the unit is read through
                pos, record = pos + 1, 0
        touched = pos - self._pos + (record > 0)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64), touched, pos, record

    def _spans(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, stops)`` of documents ``docs``, int64, vectorised :meth:`_span`."""
        bounds = self._bounds()
        if bounds is not None:
            return bounds[docs].astype(np.int64), bounds[docs + 1].astype(np.int64)
        starts = docs * self.chunk_tokens
        return starts, np.minimum(starts + self.chunk_tokens, len(self._tokens()))

    def _unit_spans(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, stops)`` of units ``units``: a unit's documents are adjacent, so one span each."""
        first = units * self.docs_per_unit
        last = np.minimum(first + self.docs_per_unit, self.num_docs) - 1
        return self._spans(first)[0], self._spans(last)[1]

    def _read_spans(self, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """The tokens of spans ``[starts[i], stops[i])`` concatenated: one read per run of adjacent spans."""
        reader = self._tokens()
        if not len(starts):
            return np.zeros(0, dtype=reader.dtype)
        breaks = np.flatnonzero(starts[1:] != stops[:-1]) + 1  # where a span does not continue the one before
        firsts = np.concatenate([[0], breaks])
        lasts = np.concatenate([breaks - 1, [len(starts) - 1]])
        return reader.read_runs(starts[firsts], stops[lasts])

    def _read_ahead(self, count: int, tokens: int) -> None:
        """Before reading from the next ``count`` units (``tokens`` tokens): keep the kernel reading ahead of them.

        A shuffled order reads the file one unit at a time at random places:
        from a cold page cache each read would wait for the disk in turn.
        Advised ahead (``POSIX_FADV_WILLNEED``, in steps of ``count`` units, up
        to :data:`READ_AHEAD_BYTES` beyond this read), the disk reads them
        together while the documents before them are packed. A file of at most
        :data:`READ_AHEAD_BLOCKS_UP_TO` bytes is advised by the blocks under
        those units instead (:meth:`_new_blocks`): one request per run of new
        blocks rather than one per document, whose cost in the kernel (tens of
        microseconds from a cold cache here) bounded the ingest.
        """
        epoch, done, ahead = self._advised
        if epoch != self._epoch or done < self._pos:
            done, ahead = self._pos, 0
        order = self._assignment()
        reader = self._tokens()
        budget = READ_AHEAD_BYTES // reader.dtype.itemsize + tokens
        by_block = len(reader) * reader.dtype.itemsize <= READ_AHEAD_BLOCKS_UP_TO
        while ahead < budget and done < len(order):
            starts, stops = self._unit_spans(np.asarray(order[done : done + max(1, count)], dtype=np.int64))
            reader.advise(*(self._new_blocks(starts, stops) if by_block else (starts, stops)))
            done += len(starts)
            ahead += int((stops - starts).sum())
        self._advised = (self._epoch, done, max(0, ahead - tokens))  # this read is next: the rest is ahead

    def _new_blocks(self, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The blocks of :data:`READ_AHEAD_BLOCK` bytes under spans ``[starts, stops)`` not advised yet this epoch.

        In the order the spans come (the order they are read in), each block
        once, runs of adjacent new blocks as one span: a corpus of at most
        :data:`READ_AHEAD_BLOCKS_UP_TO` bytes is a few hundred sequential
        requests per epoch instead of one per document. Every block is read
        within the epoch (the documents cover the file), so nothing advised
        is wasted while the corpus fits the page cache.
        """
        reader = self._tokens()
        per_block = max(1, READ_AHEAD_BLOCK // reader.dtype.itemsize)
        count = -(-len(reader) // per_block)
        if self._blocks is None or self._blocks[0] != self._epoch:
            self._blocks = (self._epoch, np.zeros(count, dtype=bool))
        seen = self._blocks[1]
        keep = stops > starts
        firsts, lasts = starts[keep] // per_block, (stops[keep] - 1) // per_block
        spans = lasts - firsts + 1  # blocks under each span, expanded in order below
        blocks = np.repeat(firsts, spans) + (np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans))
        blocks = blocks[np.sort(np.unique(blocks, return_index=True)[1])]  # first come, first advised
        blocks = blocks[~seen[blocks]]
        seen[blocks] = True
        if not len(blocks):
            return blocks, blocks
        breaks = np.flatnonzero(np.diff(blocks) != 1) + 1
        first = blocks[np.concatenate([[0], breaks])]
        last = blocks[np.concatenate([breaks - 1, [len(blocks) - 1]])]
        return first * per_block, np.minimum((last + 1) * per_block, len(reader))

    def _span(self, doc: int) -> tuple[int, int]:
        bounds = self._bounds()
        if bounds is not None:
            return int(bounds[doc]), int(bounds[doc + 1])
        return doc * self.chunk_tokens, min((doc + 1) * self.chunk_tokens, len(self._tokens()))

    def _pieces(self, doc: int) -> int:
        """Records of document ``doc``: its pieces (an empty document is one empty record)."""
        if self.piece_tokens is None:
            return 1
        lo, hi = self._span(doc)
        return max(1, -(-(hi - lo) // self.piece_tokens))

    RECORD_NAME = "document"

    def _epoch_work(self) -> tuple[int | None, str]:
        """The tokens of this shard's documents in one epoch (one vectorised sum over its units)."""
        units = self._assignment().astype(np.int64)
        if self.shard[1] == 1:
            return len(self._tokens()), "token"
        first = units * self.docs_per_unit
        last = np.minimum(first + self.docs_per_unit, self.num_docs)
        bounds = self._bounds()
        if bounds is not None:
            return int((np.asarray(bounds[last]) - np.asarray(bounds[first])).sum()), "token"
        n = len(self._tokens())
        return int((np.minimum(last * self.chunk_tokens, n) - np.minimum(first * self.chunk_tokens, n)).sum()), "token"

    def _unit_length(self, unit: int) -> int:
        first = unit * self.docs_per_unit
        docs = range(first, min(first + self.docs_per_unit, self.num_docs))
        return len(docs) if self.piece_tokens is None else sum(self._pieces(d) for d in docs)

    def _records(self, unit: int, start: int) -> Iterator[Document | SourceError]:
        tokens = self._tokens()
        first = unit * self.docs_per_unit
        record = 0
        for doc in range(first, min(first + self.docs_per_unit, self.num_docs)):
            lo, hi = self._span(doc)
            pieces = self._pieces(doc)
            if record + pieces <= start:  # every piece of it is before the restore point
                record += pieces
                continue
            step = self.piece_tokens or max(1, hi - lo)
            for k in range(max(0, start - record), pieces):
                a, b = lo + k * step, min(hi, lo + (k + 1) * step)
                out = as_tokens(tokens[a:b], f"{self.path} document {doc}" + (f" piece {k}" if pieces > 1 else ""))
                yield out if isinstance(out, SourceError) else {"tokens": out}  # a negative id: on_error decides
            record += pieces


def _open_tokens(path: str, dtype: np.dtype | None) -> np.ndarray:
    if not os.path.isfile(path):
        what = "a directory, not a token file (name its .npy or .bin)" if os.path.isdir(path) else "no such token file"
        raise SourceError(f"{path}: {what}")
    try:
        if path.endswith(".npy"):
            array: Any = np.load(path, mmap_mode="r", allow_pickle=False)
        else:
            if dtype is None:
                raise SourceError(f"{path}: a raw token file needs dtype= (one of {sorted(TOKEN_DTYPES)})")
            size = os.path.getsize(path)
            if size % dtype.itemsize:
                raise SourceError(f"{path}: {size} bytes is not a whole number of {dtype} tokens")
            if size == 0:
                raise SourceError(f"{path}: empty source, nothing to read")
            array = np.memmap(path, dtype=dtype.newbyteorder("<"), mode="r")
    except SourceError:
        raise
    except (OSError, ValueError) as e:
        raise SourceError(f"{path}: not a token file: {e}") from e
    if array.ndim != 1:
        raise SourceError(f"{path}: tokens must be a 1-D array, got shape {array.shape}")
    if dtype is not None and array.dtype != dtype:
        raise SourceError(f"{path}: holds {array.dtype} tokens, dtype={dtype} was given")
    if array.dtype.str.lstrip("<=|") not in TOKEN_DTYPES:
        raise SourceError(f"{path}: wrong token dtype {array.dtype}; expected one of {sorted(TOKEN_DTYPES)}")
    return array


def _open_offsets(path: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise SourceError(f"{path}: no such offsets file")
    with open(path, "rb") as f:
        head = f.read(len(_MEGATRON_MAGIC))
    if head == _MEGATRON_MAGIC:
        raise SourceError(f"{path}: a Megatron .idx file (MMIDIDX header): give offsets as a .npy array or a raw "
                          "file of little-endian int64 document boundaries (np.asarray(o, '<i8').tofile(path))")
    if head.startswith(b"\x93NUMPY"):
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SourceError(f"{path}: not a .npy offsets array: {e}") from e
    size = os.path.getsize(path)  # a raw file of int64 boundaries (the usual corpus.idx)
    if size % 8 or size < 16:
        raise SourceError(f"{path}: {size} bytes is not a raw file of >= 2 little-endian int64 document boundaries "
                          "(nor a .npy array)")
    return np.memmap(path, dtype="<i8", mode="r")


def _check_offsets(bounds: np.ndarray, num_tokens: int, where: str) -> None:
    problem = offsets_problem(bounds, num_tokens)  # the rule write_dataset applies too
    if problem is not None:
        raise SourceError(f"{where}: {problem}")


def _as_array(tokens: np.ndarray | torch.Tensor) -> np.ndarray:
    array = tokens.detach().cpu().numpy() if isinstance(tokens, torch.Tensor) else tokens
    if array.ndim != 1:
        raise SourceError(f"tokens must be a 1-D array, got shape {array.shape}")
    if array.dtype.str.lstrip("<=|") not in TOKEN_DTYPES:
        raise SourceError(f"wrong token dtype {array.dtype}; expected one of {sorted(TOKEN_DTYPES)}")
    if len(array) == 0:
        raise SourceError("empty source, nothing to read")
    return array


#: how far a token file's bulk reads keep the kernel reading ahead of them (:meth:`TokenFile._read_ahead`)
READ_AHEAD_BYTES = 32 << 20
#: units above which a token file warns that its per-epoch order (int64, built whole) is large: 1 GiB
LARGE_ORDER_UNITS = 1 << 27
#: a token file of at most this many bytes is advised by blocks (:meth:`TokenFile._new_blocks`), a larger one
#: by document: the blocks around a shuffle's next documents are mostly wanted soon only when the file is small
#: next to the read-ahead budget (here at most 4x it); in a larger file they would be read for one document each
READ_AHEAD_BLOCKS_UP_TO = 4 * READ_AHEAD_BYTES
#: the request size of block advice
READ_AHEAD_BLOCK = 256 << 10
