"""Per-token tensors derived from per-row sequence lengths: what a token-efficient row does not store.

A token-efficient row stores its tokens once (``Layout.labels_from``: the row's
tokens and the one after them, read back as ``input_ids`` and ``labels``, two
views of the same bytes) and the lengths of the sequences packed into it, the
ragged key ``seq_lens`` (int32 per row, in row order; padding follows the
last, so a row's real tokens are ``sum(seq_lens)``). Everything else a trainer
uses is derived, for the tokens at global positions ``positions`` of each row
(a cp rank holds a share of the row; default: the whole row ``0 .. S-1``):

- :func:`mask_labels`: ``labels`` with ``-100`` (``IGNORE_INDEX``) on the last
  token of each sequence (its next token belongs to another one) and on padding;
- :func:`position_ids`: the position inside its sequence, 0 on padding;
- :func:`document_ids`: the sequence's index in the row, -1 on padding (what
  ``transforms.attention`` turns into masks and flex-attention ``BlockMask``);
- :func:`row_cu_seqlens`: the per-row ``[rows, S + 1]`` int32 offsets ``Pack`` writes.

Pure torch over the whole batch at once (no Python loop over rows): a
training step runs them on the device, on the tensors it received. The reader
derives on the CPU with the numpy twins, a few times faster at a step's size
(:func:`ignored_labels`, :func:`derived_arrays`: equal results, tested so),
after :func:`seq_lens_problem` has judged the stored lengths (untrusted bytes)
and :func:`padding_problem` the tokens they call padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from torch_tgb.transforms.packing import IGNORE_INDEX

__all__ = [
    "DERIVABLE",
    "SEQ_LENS_KEY",
    "SequenceBounds",
    "derived_arrays",
    "document_ids",
    "ignored_labels",
    "mask_labels",
    "padding_at",
    "padding_problem",
    "position_ids",
    "row_cu_seqlens",
    "seq_lens_problem",
]

#: the ragged key of a token-efficient row: the lengths of the sequences packed into it
SEQ_LENS_KEY = "seq_lens"
#: the keys a reader can derive from ``seq_lens`` (``ReaderOptions(derive=...)``)
DERIVABLE = ("labels", "position_ids", "document_ids", "cu_seqlens")


class _Sequences(NamedTuple):
    """Where rows' sequences lie (numpy): what :func:`seq_lens_problem`, :func:`derived_arrays` and
    :func:`ignored_labels` all start from."""

    before: np.ndarray  # int64 [sequences + 1]: tokens before each sequence, over all rows (and in all)
    row_of: np.ndarray  # int64 [sequences]: each sequence's row
    end: np.ndarray  # int64 [sequences]: each sequence's end (exclusive) inside its row
    real: np.ndarray  # int64 [rows]: real tokens per row (the rest is padding)


def _sequences(lengths: np.ndarray, offsets: np.ndarray) -> _Sequences:
    """:class:`_Sequences` of ragged ``seq_lens`` (values, int64 offsets ``[rows + 1]``). Pure."""
    before = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=before[1:])
    at_row = before[offsets]  # tokens before each row (and in all)
    row_of = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    return _Sequences(before, row_of, before[1:] - at_row[:-1][row_of], np.diff(at_row))


def seq_lens_problem(lengths: np.ndarray, offsets: np.ndarray, seq_len: int) -> str | None:
    """What is wrong with rows' stored ``seq_lens`` (None: nothing). Pure.

    Lengths are untrusted bytes (a CRC only says they were written so; the
    offsets were checked on read): each must be ``>= 1`` (packers write no
    empty sequence; a row of ``[0, 0, ...]`` would have every label ignored and
    every position 0; a padding row holds no sequence at all), a row's must
    sum to at most ``seq_len`` (or the derived tensors would mark tokens of
    other rows) and a row holds at most ``seq_len`` of them (``cu_seqlens`` has
    room for no more). Lengths that sum to less than a row's content are
    :func:`padding_problem`'s to find (it needs the tokens).
    """
    lengths = np.asarray(lengths)
    if not lengths.size:
        return None
    counts = np.diff(np.asarray(offsets, dtype=np.int64))
    if int(counts.max(initial=0)) > seq_len:
        row = int(np.argmax(counts))
        return f"row {row} holds {int(counts[row])} sequences, more than its seq_len {seq_len}"
    if int(lengths.min()) < 1:
        at = int(np.argmin(lengths))
        row = int(np.searchsorted(np.asarray(offsets, dtype=np.int64), at, side="right")) - 1
        return (f"row {row} holds a sequence of length {int(lengths[at])} (lengths are >= 1: a packer writes "
                "no empty sequence)")
    real = _sequences(lengths, np.asarray(offsets, dtype=np.int64)).real
    if int(real.max(initial=0)) > seq_len:
        row = int(np.argmax(real))
        return f"row {row}'s sequences hold {int(real[row])} tokens, more than its seq_len {seq_len}"
    return None


def padding_at(
    lengths: np.ndarray, offsets: np.ndarray, seq_len: int, ranges: Sequence[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, columns, real)``: where a rank's ``[rows, n]`` tokens are padding by the rows' lengths. Pure.

    The rank holds token positions ``ranges`` of every row (as :func:`ignored_labels`
    takes them); a token is padding at positions ``>= sum(seq_lens)`` of its row
    (``real``, per row). ``lengths`` must pass :func:`seq_lens_problem`.
    """
    real = _sequences(np.asarray(lengths, dtype=np.int64), np.asarray(offsets, dtype=np.int64)).real
    positions = np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in ranges])
    if not len(real) or not len(positions) or int(real.min()) > int(positions.max()):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, real
    rows, columns = np.nonzero(positions[None, :] >= real[:, None])
    return rows, columns, real


def padding_problem(tokens: np.ndarray, padding: tuple[np.ndarray, np.ndarray, np.ndarray], key: str) -> str | None:
    """What is wrong with the tokens that rows' lengths call padding (None: nothing). Pure.

    ``tokens``: a rank's ``[rows, n]`` tokens of ``key``; ``padding``:
    :func:`padding_at` of its rows' lengths. A packer pads a row after its
    last sequence with one pad id, the same in every row; lengths that sum to
    less than a row's content call real tokens padding (their labels would be
    ignored, their positions 0), and those differ from the pad id. Such rows
    are found where their real tokens differ from the step's pad id (the most
    common padding token): a row short of its content by tokens equal to the
    pad id looks padded, and is.
    """
    rows, columns, real = padding
    if not len(rows):
        return None
    values = tokens[rows, columns]
    if values.min() == values.max():
        return None
    # a row whose padding is not one value, else a row whose pad value is not the other rows'
    firsts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
    mixed = values != np.repeat(values[firsts], np.diff(np.append(firsts, len(values))))
    if mixed.any():
        row = int(rows[int(np.argmax(mixed))])
        held = values[rows == row]
        return (f"row {row} holds {key} tokens {held[:4].tolist()}{' ...' if len(held) > 4 else ''} after the "
                f"{int(real[row])} its seq_lens count, where a packer pads with one id: lengths that stop short of "
                "the row's content")
    uniques, counts = np.unique(values[firsts], return_counts=True)
    pad = uniques[int(np.argmax(counts))]
    row = int(rows[firsts[int(np.argmax(values[firsts] != pad))]])
    return (f"row {row} holds {key} token {values[rows == row][0].item()} after the {int(real[row])} its seq_lens "
            f"count, where the step's other rows pad with {pad.item()}: lengths that stop short of the row's content")


def derived_arrays(
    lengths: np.ndarray, offsets: np.ndarray, seq_len: int, ranges: Sequence[tuple[int, int]], names: Sequence[str]
) -> dict[str, np.ndarray]:
    """The reader's fast path of :func:`position_ids`, :func:`document_ids` and :func:`row_cu_seqlens`. Pure.

    ``names``: any of ``"position_ids"`` (int64), ``"document_ids"`` (int32) and
    ``"cu_seqlens"`` (int32 ``[rows, seq_len + 1]``), for the token positions
    ``ranges`` of each row (as :func:`ignored_labels` takes them); the same
    values as the torch functions over :class:`SequenceBounds`, by numpy over
    the whole batch. ``lengths`` must pass :func:`seq_lens_problem`.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    rows = len(offsets) - 1
    before, row_of, end, real = _sequences(lengths, offsets)
    slot = np.arange(len(lengths), dtype=np.int64) - offsets[:-1][row_of]  # each sequence's index in its row
    # the real tokens of a row come first: in row-major order they are the grid's cells left of each row's padding
    filled = None if bool((real >= seq_len).all()) else np.arange(seq_len)[None, :] < real[:, None]
    out: dict[str, np.ndarray] = {}
    for name in names:
        if name == "cu_seqlens":
            cu = np.full((rows, seq_len + 1), seq_len, dtype=np.int32)
            cu[:, 0] = 0
            cu[row_of, slot + 1] = end
            out[name] = cu
            continue
        if name == "position_ids":
            values, pad, dtype = np.arange(int(before[-1]), dtype=np.int64) - np.repeat(before[:-1], lengths), 0, np.int64
        elif name == "document_ids":
            values, pad, dtype = np.repeat(slot.astype(np.int32), lengths), -1, np.int32
        else:
            raise ValueError(f"cannot derive {name!r}: derived_arrays makes position_ids, document_ids, cu_seqlens")
        if filled is None:
            grid = values.reshape(rows, seq_len).astype(dtype, copy=False)
        else:
            grid = np.full((rows, seq_len), pad, dtype=dtype)
            grid[filled] = values
        if len(ranges) != 1 or tuple(ranges[0]) != (0, seq_len):
            grid = np.concatenate([grid[:, lo:hi] for lo, hi in ranges], axis=1)
        out[name] = grid
    return out


def ignored_labels(
    lengths: np.ndarray, offsets: np.ndarray, seq_len: int, ranges: Sequence[tuple[int, int]]
) -> np.ndarray:
    """Flat indices into a rank's ``[rows, n]`` labels whose label is ignored (-100): the reader's fast path.

    The rank holds token positions ``ranges`` of every row (``[lo, hi)`` pairs,
    concatenated in that order: ``n`` tokens). A label is ignored on the last
    token of each sequence and on padding (positions ``>= sum(seq_lens)``).
    Numpy over the sequences, a loop over padded rows only: a few microseconds
    per step where :func:`mask_labels` over :class:`SequenceBounds` costs tens.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    if len(ranges) == 1 and tuple(ranges[0]) == (0, seq_len):
        return _ignored_in_whole_rows(lengths, offsets, seq_len)
    n = sum(hi - lo for lo, hi in ranges)
    _, row_of, end, real = _sequences(lengths, offsets)
    last = end - 1  # each sequence's last token, in its row
    found = []
    column = 0  # where positions [lo, hi) sit in the rank's tokens
    for lo, hi in ranges:
        hit = (last >= lo) & (last < hi) & (lengths > 0)
        found.append(row_of[hit] * n + column + last[hit] - lo)
        for r in np.nonzero(real < hi)[0].tolist():
            first = max(int(real[r]), lo)
            found.append(np.arange(r * n + column + first - lo, r * n + column + hi - lo, dtype=np.int64))
        column += hi - lo
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _ignored_in_whole_rows(lengths: np.ndarray, offsets: np.ndarray, seq_len: int) -> np.ndarray:
    """:func:`ignored_labels` of a rank holding whole rows (cp = 1): a handful of numpy calls, no loop."""
    _, row_of, end, real = _sequences(lengths, offsets)
    ends: np.ndarray = row_of * seq_len + end - 1  # each sequence's last token
    if not lengths.all():
        ends = ends[lengths > 0]
    if bool((real >= seq_len).all()):
        return ends
    ignored = np.arange(seq_len)[None, :] >= real[:, None]  # padding
    ignored.reshape(-1)[ends] = True
    return np.flatnonzero(ignored)


class SequenceBounds:
    """Where each token of each row lies: its sequence's index, start and end, from the rows' ``seq_lens``.

    ``lengths`` / ``offsets``: the ragged ``seq_lens`` of ``rows`` rows (values
    and int64 offsets ``[rows + 1]``); ``seq_len``: tokens per row; ``positions``:
    the global positions (in ``[0, seq_len)``) of the tokens asked about.
    """

    def __init__(
        self, lengths: torch.Tensor, offsets: torch.Tensor, seq_len: int, positions: torch.Tensor | None = None
    ) -> None:
        device = lengths.device
        pos = torch.arange(seq_len, device=device) if positions is None else positions.to(device=device, dtype=torch.int64)
        rows, row_of, slot, in_row = _ends_in_row(lengths, offsets)
        width = max(1, int(slot.max()) + 1) if slot.numel() else 1
        # ends[r, j]: the end (exclusive) of row r's sequence j; past the last one, beyond any position
        ends = torch.full((rows, width), seq_len + 1, dtype=torch.int64, device=device)
        ends[row_of, slot] = in_row
        starts = torch.cat([torch.zeros(rows, 1, dtype=torch.int64, device=device), ends[:, :-1]], dim=1)
        real = torch.zeros(rows, dtype=torch.int64, device=device).index_add_(0, row_of, lengths.to(torch.int64))
        grid = pos.expand(rows, -1).contiguous()
        #: index of each token's sequence ([rows, n]); padding tokens get an index past the last sequence
        self.index = torch.searchsorted(ends, grid, right=True)
        self.padding = grid >= real[:, None]
        safe = self.index.clamp(max=width - 1)
        self.start = torch.gather(starts, 1, safe)
        self.end = torch.gather(ends, 1, safe)
        self.positions = grid


def mask_labels(labels: torch.Tensor, bounds: SequenceBounds, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """``labels`` (the raw one-token shift) as ``dtype`` with -100 where a sequence ends and on padding (a copy)."""
    out = labels.to(dtype=dtype, copy=True)
    out[(bounds.positions + 1 == bounds.end) | bounds.padding] = IGNORE_INDEX
    return out


def position_ids(bounds: SequenceBounds) -> torch.Tensor:
    """int64 ``[rows, n]``: each token's position inside its sequence, 0 on padding."""
    return (bounds.positions - bounds.start).masked_fill(bounds.padding, 0)


def document_ids(bounds: SequenceBounds) -> torch.Tensor:
    """int32 ``[rows, n]``: each token's sequence index in its row, -1 on padding."""
    return bounds.index.masked_fill(bounds.padding, -1).to(torch.int32)


def row_cu_seqlens(lengths: torch.Tensor, offsets: torch.Tensor, seq_len: int) -> torch.Tensor:
    """int32 ``[rows, seq_len + 1]`` as ``Pack`` writes it: 0, each sequence's end, the padding's end, then ``seq_len``."""
    rows, row_of, slot, in_row = _ends_in_row(lengths, offsets)
    out = torch.full((rows, seq_len + 1), seq_len, dtype=torch.int64, device=lengths.device)
    out[:, 0] = 0
    out[row_of, slot + 1] = in_row
    return out.to(torch.int32)


def _ends_in_row(lengths: torch.Tensor, offsets: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rows, row of each sequence, its index in its row, its end inside its row)`` of ragged ``seq_lens``."""
    device = lengths.device
    offsets = offsets.to(device=device, dtype=torch.int64)
    lengths = lengths.to(torch.int64)
    rows = int(offsets.shape[0]) - 1
    counts = offsets[1:] - offsets[:-1]
    row_of = torch.repeat_interleave(torch.arange(rows, device=device), counts)
    slot = torch.arange(lengths.shape[0], device=device) - offsets[:-1][row_of]
    cum = torch.cumsum(lengths, 0)
    before_row = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), cum])[offsets[:-1]]
    return rows, row_of, slot, cum - before_row[row_of]
