"""Packing documents into fixed-length rows, with document masks and varlen metadata.

The packers are pure and return bins (rows) of spans ``(doc, start, end)``;
no token is ever dropped:

- ``pack_bfd`` (best-fit decreasing): a document longer than ``seq_len`` is
  cut into ``seq_len`` chunks plus a remainder; chunks are placed largest
  first, each into the fullest row that still has room, which lands at
  96-99 % utilisation on realistic length mixes (seed 001).
- ``pack_concat`` (greedy sequential fill): documents in arrival order fill
  row after row, a document that does not fit is split at the row end and
  continues in the next row. Only the last row has padding; more documents
  are cut than with BFD.

``pack_rows`` materialises the rows: ``input_ids``, ``labels`` (next token
within the same span, ``-100`` across span boundaries and on padding),
``document_ids`` (span index within the row, ``-1`` on padding) and
``position_ids`` (restart at 0 per span: a piece of a split document starts
at 0 in its row too). With ``attention_metadata=True`` also ``cu_seqlens``
(int32, ``seq_len + 1`` entries: ``0``, the end of each span, then, if the
row has padding, ``seq_len`` closing the padding segment; the remaining
entries repeat ``seq_len``, i.e. zero-length segments, so rows of any
document count stack) and ``max_seqlen`` (int32, shape ``[1]``: the longest
segment, the padding segment included, so it is safe to pass together with
``cu_seqlens`` to a variable-length attention kernel).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "IGNORE_INDEX",
    "PACKERS",
    "Span",
    "cu_seqlens",
    "pack",
    "pack_bfd",
    "pack_concat",
    "pack_rows",
    "packing_efficiency",
]

#: label value that loss functions ignore (``torch.nn.CrossEntropyLoss`` default)
IGNORE_INDEX = -100

#: ``(document index, first token, end token)`` of one packed piece of a document
Span = tuple[int, int, int]


def _lengths(doc_lengths: Sequence[int] | np.ndarray, seq_len: int) -> np.ndarray:
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    lengths = np.asarray(doc_lengths, dtype=np.int64).reshape(-1)
    if (lengths < 0).any():
        raise ValueError("document lengths must be >= 0")
    return lengths


def pack_bfd(doc_lengths: Sequence[int] | np.ndarray, seq_len: int) -> list[list[Span]]:
    """Pack documents into rows of ``seq_len`` tokens, best-fit decreasing.

    Returns the rows in creation order; each row is a list of spans. Empty
    documents produce no span. Deterministic: ties are broken by document
    index. O(n log n) plus, per chunk, a bisect over at most ``seq_len``
    distinct free sizes.
    """
    lengths = _lengths(doc_lengths, seq_len)
    full, tail = np.divmod(lengths, seq_len)
    # a full chunk fills a row by itself: those rows first, in document then chunk order
    docs = np.repeat(np.arange(len(lengths)), full)
    firsts = np.cumsum(full) - full  # each document's first full row
    starts = (np.arange(len(docs)) - np.repeat(firsts, full)) * seq_len
    bins: list[list[Span]] = [[(d, a, a + seq_len)] for d, a in zip(docs.tolist(), starts.tolist())]
    # the partial chunks, longest first, ties by document (a stable sort of the documents in order)
    partial = np.flatnonzero(tail)
    order = partial[np.argsort(-tail[partial], kind="stable")]
    rest = zip(tail[order].tolist(), order.tolist(), (full[order] * seq_len).tolist())
    # free space -> rows with exactly that much free space (a stack: deterministic), and the sorted free sizes
    by_free: dict[int, list[int]] = {}
    free_sizes: list[int] = []
    find, insort = bisect.bisect_left, bisect.insort
    for length, doc, start in rest:
        i = find(free_sizes, length)
        if i < len(free_sizes):
            free = free_sizes[i]
            rows = by_free[free]
            row = rows.pop()
            if not rows:
                del free_sizes[i], by_free[free]
            bins[row].append((doc, start, start + length))
        else:
            free, row = seq_len, len(bins)
            bins.append([(doc, start, start + length)])
        left = free - length
        if left:
            stack = by_free.get(left)
            if stack is None:
                stack = by_free[left] = []
                insort(free_sizes, left)
            stack.append(row)
    return bins


def pack_concat(doc_lengths: Sequence[int] | np.ndarray, seq_len: int) -> list[list[Span]]:
    """Fill rows with documents in order, splitting a document at a row end; O(total rows + docs)."""
    lengths = _lengths(doc_lengths, seq_len)
    bins: list[list[Span]] = []
    free = 0
    for doc, n in enumerate(lengths.tolist()):
        start = 0
        while start < n:
            if free == 0:
                bins.append([])
                free = seq_len
            take = min(free, n - start)
            bins[-1].append((doc, start, start + take))
            start += take
            free -= take
    return bins


#: packers by name (``Pack(method=...)``)
PACKERS: dict[str, Callable[[Sequence[int] | np.ndarray, int], list[list[Span]]]] = {
    "bfd": pack_bfd,
    "concat": pack_concat,
}


def pack(doc_lengths: Sequence[int] | np.ndarray, seq_len: int, method: str = "bfd") -> list[list[Span]]:
    """Dispatch to a packer by name (``"bfd"`` or ``"concat"``)."""
    if method not in PACKERS:
        raise ValueError(f"unknown packing method {method!r}; choose from {sorted(PACKERS)}")
    return PACKERS[method](doc_lengths, seq_len)


def packing_efficiency(bins: Sequence[Sequence[Span]], seq_len: int) -> float:
    """Fraction of row positions that hold tokens."""
    if not bins:
        return 1.0
    used = sum(end - start for row in bins for _, start, end in row)
    return used / (len(bins) * seq_len)


def pack_rows(
    tokens: np.ndarray,
    offsets: np.ndarray,
    bins: Sequence[Sequence[Span]],
    seq_len: int,
    *,
    pad_id: int = 0,
    dtype: np.dtype | type = np.int64,
    attention_metadata: bool = False,
) -> dict[str, np.ndarray]:
    """Rows ``[len(bins), seq_len]`` of ``input_ids``, ``labels``, ``document_ids``, ``position_ids``.

    ``tokens`` is the flat token stream and document ``d`` is
    ``tokens[offsets[d]:offsets[d+1]]``. ``labels[r, i]`` is the next token of
    the same span, else ``IGNORE_INDEX``. ``attention_metadata`` adds
    ``cu_seqlens`` ``[n, seq_len + 1]`` and ``max_seqlen`` ``[n, 1]`` (int32,
    see the module docstring).
    """
    n = len(bins)
    input_ids = np.full((n, seq_len), pad_id, dtype=dtype)
    labels = np.full((n, seq_len), IGNORE_INDEX, dtype=np.int64)
    document_ids = np.full((n, seq_len), -1, dtype=np.int32)
    position_ids = np.zeros((n, seq_len), dtype=np.int64)
    for r, row in enumerate(bins):
        pos = 0
        for k, (doc, start, end) in enumerate(row):
            length = end - start
            if pos + length > seq_len:
                raise ValueError(f"row {r} overflows seq_len={seq_len}")
            base = int(offsets[doc])
            piece = tokens[base + start : base + end]
            input_ids[r, pos : pos + length] = piece
            labels[r, pos : pos + length - 1] = piece[1:]
            document_ids[r, pos : pos + length] = k
            position_ids[r, pos : pos + length] = np.arange(length)
            pos += length
    out = {"input_ids": input_ids, "labels": labels, "document_ids": document_ids, "position_ids": position_ids}
    if attention_metadata:
        out["cu_seqlens"], out["max_seqlen"] = cu_seqlens(bins, seq_len)
    return out


def cu_seqlens(bins: Sequence[Sequence[Span]], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(cu_seqlens [n, seq_len + 1], max_seqlen [n, 1])`` of packed rows, int32, padded to ``seq_len``."""
    n = len(bins)
    cu = np.full((n, seq_len + 1), seq_len, dtype=np.int32)
    longest = np.zeros((n, 1), dtype=np.int32)
    for r, row in enumerate(bins):
        ends = np.cumsum([0] + [end - start for _, start, end in row])
        cu[r, : len(ends)] = ends
        segments = np.diff(np.append(ends, seq_len))  # the padding segment (maybe empty) last
        longest[r, 0] = int(segments.max()) if len(segments) else 0
    return cu, longest
