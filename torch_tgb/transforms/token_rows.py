"""Token-efficient rows: each token once, at its own width, with the lengths of the sequences packed in.

A packer decides *spans* (which piece of which document goes where, see
``packing.py``); this module turns spans into rows with one slice copy per
span (each token moved once) and numpy over the span table (no Python loop
over rows or tokens):

- :class:`Spans`: the spans of a window as flat arrays (row, document, start,
  length), rows in order and spans in row order;
- :func:`spans_from_bins` (the list-of-lists packers' output),
  :func:`concat_spans` (sequential fill, vectorised) and :func:`chunk_spans`
  (concat-and-chunk: the stream cut every ``seq_len`` tokens, one sequence a
  row, documents not separated);
- :func:`token_rows`: ``tokens [rows, seq_len + 1]`` (the row's tokens, padded
  with ``pad_id``, and one more column that readers use as the token after the
  row; a row always ends a sequence, so its label there is ignored) and the
  rows' ``seq_lens`` (int32 lengths of the spans of each row, as ragged values
  plus int64 offsets ``[rows + 1]``). This is what ``Layout(labels_from=...)``
  stores and ``transforms.derive`` reads back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from torch_tgb.transforms.packing import Span

__all__ = ["Spans", "chunk_spans", "concat_spans", "spans_from_bins", "token_rows"]


@dataclass(frozen=True)
class Spans:
    """Spans of ``rows`` rows: span ``i`` is ``length[i]`` tokens of document ``doc[i]`` from its ``start[i]``.

    Spans are in row order (``row`` non-decreasing) and, inside a row, in the
    order they are laid out; every row has at least one span.
    """

    rows: int
    row: np.ndarray
    doc: np.ndarray
    start: np.ndarray
    length: np.ndarray

    def __post_init__(self) -> None:
        for name in ("row", "doc", "start", "length"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.int64))


def spans_from_bins(bins: Sequence[Sequence[Span]]) -> Spans:
    """The :class:`Spans` of a packer's bins (``[(doc, start, end), ...]`` per row)."""
    flat = [(r, doc, start, end - start) for r, row in enumerate(bins) for doc, start, end in row]
    if not flat:
        return Spans(len(bins), *(np.zeros(0, dtype=np.int64) for _ in range(4)))
    table = np.asarray(flat, dtype=np.int64)
    return Spans(len(bins), table[:, 0], table[:, 1], table[:, 2], table[:, 3])


def concat_spans(doc_lengths: Sequence[int] | np.ndarray, seq_len: int) -> Spans:
    """Documents in order filling row after row, a document split at a row end (``pack_concat``, vectorised)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    lengths = np.asarray(doc_lengths, dtype=np.int64).reshape(-1)
    if (lengths < 0).any():
        raise ValueError("document lengths must be >= 0")
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    if total == 0:
        return Spans(0, *(np.zeros(0, dtype=np.int64) for _ in range(4)))
    starts = ends - lengths
    # a span starts at every document start and every row start; empty documents add nothing
    cuts = np.union1d(starts[lengths > 0], np.arange(0, total, seq_len))
    stops = np.append(cuts[1:], total)
    doc = np.searchsorted(ends, cuts, side="right")
    return Spans(-(-total // seq_len), cuts // seq_len, doc, cuts - starts[doc], stops - cuts)


def chunk_spans(total_tokens: int, seq_len: int) -> Spans:
    """The stream (document 0 of ``total_tokens``) cut every ``seq_len`` tokens: one span a row."""
    if seq_len < 1 or total_tokens < 0:
        raise ValueError(f"need seq_len >= 1 and total_tokens >= 0, got {seq_len=} {total_tokens=}")
    rows = -(-total_tokens // seq_len)
    starts = np.arange(rows, dtype=np.int64) * seq_len
    return Spans(rows, np.arange(rows), np.zeros(rows, dtype=np.int64), starts,
                 np.minimum(seq_len, total_tokens - starts))


def token_rows(
    tokens: np.ndarray, offsets: np.ndarray, spans: Spans, seq_len: int, *, pad_id: int = 0,
    dtype: np.dtype | type | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows [n, seq_len + 1], seq_lens values int32, seq_lens offsets int64 [n + 1])`` of ``spans``.

    ``tokens``/``offsets``: the window's flat tokens, document ``d`` being
    ``tokens[offsets[d]:offsets[d+1]]``. ``dtype``: of the rows (default: the
    tokens'). One gather over the packed tokens; nothing is copied per row.
    """
    n = spans.rows
    out_dtype = np.dtype(tokens.dtype if dtype is None else dtype)
    width = seq_len + 1
    rows = np.full(n * width, pad_id, dtype=out_dtype)
    counts = np.bincount(spans.row, minlength=n) if len(spans.row) else np.zeros(n, dtype=np.int64)
    row_first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    total = int(spans.length.sum())
    if total:
        # each span's place in its row: the lengths of the row's earlier spans
        cum = np.cumsum(spans.length) - spans.length
        in_row = cum - cum[row_first[:-1]][spans.row]
        if bool((in_row + spans.length > seq_len).any()):
            raise ValueError(f"spans overflow a row of seq_len={seq_len}")
        dest = spans.row * width + in_row
        src = np.asarray(offsets, dtype=np.int64)[spans.doc] + spans.start
        _copy_spans(rows, tokens, dest, src, spans.length, seq_len)
    return rows.reshape(n, width), spans.length.astype(np.int32), row_first


def _copy_spans(rows: np.ndarray, tokens: np.ndarray, dest: np.ndarray, src: np.ndarray, length: np.ndarray,
                seq_len: int) -> None:
    """``rows[dest[i]:][:length[i]] = tokens[src[i]:][:length[i]]`` for every span ``i`` (rows ``seq_len + 1`` wide).

    One slice copy per span: spans are runs of tokens (a document's, or a row's
    worth), so this moves each token once at memcpy speed; an index per token
    would move three times its bytes. Full rows cut from one stretch of tokens
    (concat-and-chunk: every span but the last) are one strided copy instead.
    """
    width, head = seq_len + 1, len(length) - 1
    if (head > 1 and bool((length[:head] == seq_len).all()) and bool((np.diff(dest[:head]) == width).all())
            and bool((np.diff(src[:head]) == seq_len).all())):
        d, a = int(dest[0]), int(src[0])  # a span of seq_len starts its row: these are rows head after head
        block = rows[d : d + head * width].reshape(head, width)
        block[:, :seq_len] = tokens[a : a + head * seq_len].reshape(head, seq_len)
        dest, src, length = dest[head:], src[head:], length[head:]
    for d, a, k in zip(dest.tolist(), src.tolist(), length.tolist()):
        rows[d : d + k] = tokens[a : a + k]
