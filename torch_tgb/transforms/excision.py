"""Removing records from packed rows, keeping every other record's training exactly as it was. Pure.

``tgb excise`` rewrites the rows that hold a denied record (``docs/provenance.md``).
Two ways were possible: replace the record's tokens by a neutral token with
ignored labels, or take them out of the row. Masking keeps the tokens'
places: the row's later documents keep their positions, but the masked
tokens still take attention context (a trainer that attends across
documents still sees them) and compute, and a neutral token fed as input is
not neutral to the model. Taking them out does what packing would have done
had the record never existed: the row's other spans move up, unchanged
(each is its own sequence: its tokens, labels and positions are the same),
and the row ends with that much more padding. So rows are *re-packed in
place*: the same row of the same slice of the same step, every other span
intact, the denied spans gone.

- :func:`excise_token_rows`: token rows (``input_ids [rows, seq_len + 1]``,
  ``seq_lens``, provenance);
- :func:`excise_array_rows`: the per-token arrays of older namespaces
  (``input_ids``, ``labels``, ``document_ids``, ``position_ids``, and
  ``cu_seqlens``/``max_seqlen`` when stored).

Ragged keys are values plus int64 offsets per row (``layout.RaggedRows``).
A span is denied as a whole (``deny``: one bool per provenance span).

Rows of samples (``PackSamples``: images, clips, robot steps) are re-packed
the same way: the sample's tokens leave its row as a text record's do, and
:func:`kept_entries` takes its entries out of every ragged key (its patches,
grids, states), found by its ``provenance_counts`` (:func:`entry_owners`) or,
for ``sample_keys``, by the NUL that ends each key (:func:`key_owners`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from torch_tgb.transforms.packing import IGNORE_INDEX
from torch_tgb.transforms.provenance import unpack_extent

__all__ = ["Excised", "entry_owners", "excise_array_rows", "excise_token_rows", "kept_entries", "key_owners",
           "kept_positions"]


@dataclass(frozen=True)
class Excised:
    """Rows after excision: the changed arrays and what was removed."""

    arrays: dict[str, np.ndarray]
    seq_lens: tuple[np.ndarray, np.ndarray] | None
    provenance: tuple[np.ndarray, np.ndarray]
    spans: int  # provenance spans removed
    tokens: int  # tokens removed


def kept_positions(prov_values: np.ndarray, prov_offsets: np.ndarray, deny: np.ndarray, width: int) -> np.ndarray:
    """``[rows, width]`` bool: the positions of each row that stay (padding stays; denied spans' tokens go).

    A row's spans lie one after the other from position 0 (their lengths
    from the extents); a row whose spans overflow ``width`` is refused.
    """
    rows = len(prov_offsets) - 1
    keep = np.ones((rows, width), dtype=bool)
    _, lengths = unpack_extent(prov_values[:, 2]) if len(prov_values) else (None, np.zeros(0, np.int64))
    for r in range(rows):
        a, b = int(prov_offsets[r]), int(prov_offsets[r + 1])
        if not deny[a:b].any():
            continue
        ends = np.cumsum(lengths[a:b])
        if len(ends) and int(ends[-1]) > width:
            raise ValueError(f"row {r}: its provenance spans {int(ends[-1])} tokens, more than the row's {width}")
        starts = ends - lengths[a:b]
        for s, e in zip(starts[deny[a:b]].tolist(), ends[deny[a:b]].tolist()):
            keep[r, s:e] = False
    return keep


def _compact(rows: np.ndarray, keep: np.ndarray, fill: int | float) -> np.ndarray:
    """Each row's kept values moved to its front, in order, the rest ``fill``."""
    out = np.full_like(rows, fill)
    counts = keep.sum(axis=1)
    for r in np.flatnonzero(~keep.all(axis=1)).tolist():
        out[r, : counts[r]] = rows[r][keep[r]]
    same = keep.all(axis=1)
    out[same] = rows[same]
    return out


def _spans_kept(values: np.ndarray, offsets: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sequence lengths (``seq_lens``) after removing positions: each span keeps what stays of it; empty ones go."""
    new_vals: list[np.ndarray] = []
    new_offs = np.zeros(len(offsets), dtype=np.int64)
    for r in range(len(offsets) - 1):
        lens = values[int(offsets[r]) : int(offsets[r + 1])].astype(np.int64)
        if keep[r].all():
            kept = lens
        else:
            ends = np.cumsum(lens)
            cum = np.concatenate([[0], np.cumsum(keep[r].astype(np.int64))])
            kept = cum[ends] - cum[ends - lens]
            kept = kept[kept > 0]
        new_vals.append(kept.astype(values.dtype))
        new_offs[r + 1] = new_offs[r] + len(kept)
    return (np.concatenate(new_vals) if new_vals else values[:0]), new_offs


def _prov_kept(values: np.ndarray, offsets: np.ndarray, deny: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Provenance (values, offsets) without the denied spans."""
    rows = len(offsets) - 1
    row_of = np.repeat(np.arange(rows), np.diff(offsets))
    counts = np.bincount(row_of[~deny], minlength=rows)
    out = np.zeros(len(offsets), dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return values[~deny], out


def excise_token_rows(
    tokens: np.ndarray, seq_lens: tuple[np.ndarray, np.ndarray], provenance: tuple[np.ndarray, np.ndarray],
    deny: np.ndarray, *, pad_id: int = 0,
) -> Excised:
    """Token rows without the denied spans (see the module docstring).

    ``tokens``: ``[rows, seq_len + 1]``; ``seq_lens``/``provenance``: values
    and offsets; ``deny``: bool per provenance span. The extra last column
    stays ``pad_id`` (a row always ends a sequence).
    """
    prov_values, prov_offsets = provenance
    deny = np.asarray(deny, dtype=bool)
    if len(deny) != len(prov_values):
        raise ValueError(f"deny has {len(deny)} flags for {len(prov_values)} provenance spans")
    width = tokens.shape[1] - 1
    keep = kept_positions(prov_values, prov_offsets, deny, width)
    removed = int((~keep).sum())
    full = np.concatenate([keep, np.ones((len(keep), 1), dtype=bool)], axis=1)
    new_tokens = _compact(tokens, full, pad_id)
    new_lens = _spans_kept(seq_lens[0], seq_lens[1], keep)
    return Excised({"input_ids": new_tokens}, new_lens, _prov_kept(prov_values, prov_offsets, deny),
                   int(deny.sum()), removed)


def _seq_spans_of(document_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``seq_lens`` (values, offsets) of per-token rows from their ``document_ids`` (span index, -1 padding)."""
    vals: list[np.ndarray] = []
    offs = np.zeros(len(document_ids) + 1, dtype=np.int64)
    for r, ids in enumerate(document_ids):
        real = ids[ids >= 0]
        lens = np.bincount(real.astype(np.int64)) if len(real) else np.zeros(0, np.int64)
        lens = lens[lens > 0]
        vals.append(lens.astype(np.int32))
        offs[r + 1] = offs[r] + len(lens)
    return (np.concatenate(vals) if vals else np.zeros(0, np.int32)), offs


def excise_array_rows(
    rows: dict[str, np.ndarray], provenance: tuple[np.ndarray, np.ndarray], deny: np.ndarray, *, pad_id: int = 0,
) -> Excised:
    """Per-token rows (``input_ids``, ``labels``, ``document_ids``, ``position_ids`` ``[rows, seq_len]``, and
    ``cu_seqlens [rows, seq_len + 1]``/``max_seqlen [rows, 1]`` if present) without the denied spans.

    Kept tokens keep their labels, except one whose next token was removed:
    its label becomes the next kept token of the same sequence, else ignored.
    ``document_ids``, ``position_ids`` and the varlen metadata are recomputed
    from the sequences that remain.
    """
    prov_values, prov_offsets = provenance
    deny = np.asarray(deny, dtype=bool)
    input_ids, labels = rows["input_ids"], rows["labels"]
    width = input_ids.shape[1]
    keep = kept_positions(prov_values, prov_offsets, deny, width)
    seq_vals, seq_offs = _seq_spans_of(rows["document_ids"])
    new_vals, new_offs = _spans_kept(seq_vals, seq_offs, keep)
    out = dict(rows)
    out["input_ids"] = new_ids = _compact(input_ids, keep, pad_id)
    # a kept token whose successor went: its label is the next kept token of its sequence (set below), else ignored
    successor_gone = np.zeros_like(keep)
    successor_gone[:, :-1] = keep[:, :-1] & ~keep[:, 1:]
    new_labels = _compact(np.where(successor_gone, IGNORE_INDEX, labels), keep, IGNORE_INDEX)
    moved_gone = _compact(successor_gone, keep, False)
    doc = np.full(input_ids.shape, -1, dtype=rows["document_ids"].dtype)
    pos = np.zeros(input_ids.shape, dtype=rows["position_ids"].dtype)
    for r in range(len(input_ids)):
        lens = new_vals[int(new_offs[r]) : int(new_offs[r + 1])].astype(np.int64)
        at = 0
        for k, n in enumerate(lens.tolist()):
            doc[r, at : at + n] = k
            pos[r, at : at + n] = np.arange(n)
            for i in np.flatnonzero(moved_gone[r, at : at + n - 1]).tolist():  # a label to the next kept token
                new_labels[r, at + i] = new_ids[r, at + i + 1]
            at += n
    out["labels"], out["document_ids"], out["position_ids"] = new_labels, doc, pos
    if "cu_seqlens" in rows:
        cu = np.full(rows["cu_seqlens"].shape, width, dtype=rows["cu_seqlens"].dtype)
        longest = np.zeros(rows["max_seqlen"].shape, dtype=rows["max_seqlen"].dtype) if "max_seqlen" in rows else None
        for r in range(len(input_ids)):
            lens = new_vals[int(new_offs[r]) : int(new_offs[r + 1])].astype(np.int64)
            ends = np.concatenate([[0], np.cumsum(lens)])
            cu[r, : len(ends)] = ends
            if longest is not None:
                segments = np.diff(np.append(ends, width))
                longest[r, 0] = int(segments.max()) if len(segments) else 0
        out["cu_seqlens"] = cu
        if longest is not None:
            out["max_seqlen"] = longest
    return Excised(out, None, _prov_kept(prov_values, prov_offsets, deny), int(deny.sum()), int((~keep).sum()))


def entry_owners(counts: np.ndarray) -> np.ndarray:
    """The span (sample) each entry of a ragged key belongs to, from each span's count of entries, in row order."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if len(counts) and int(counts.min()) < 0:
        raise ValueError("a sample cannot hold a negative number of entries")
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def key_owners(keys: np.ndarray, spans: int) -> np.ndarray:
    """The span each byte of ``sample_keys`` belongs to (each sample's key ends with a NUL), for ``spans`` samples."""
    ends = np.asarray(keys).reshape(-1) == 0
    if int(ends.sum()) != spans or (len(ends) and not ends[-1]):
        raise ValueError(f"sample_keys hold {int(ends.sum())} NUL-ended keys for {spans} samples")
    owners = np.zeros(len(ends), dtype=np.int64)
    np.cumsum(ends[:-1], out=owners[1:])
    return owners


def kept_entries(offsets: np.ndarray, owners: np.ndarray, deny: np.ndarray,
                 span_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keep, offsets)`` of a ragged key without the entries of denied spans.

    ``offsets``: the key's row offsets; ``owners``: the span of each entry
    (:func:`entry_owners`); ``span_offsets``: the rows' provenance offsets.
    Each entry must belong to a span of its own row (else ValueError: the
    counts do not describe these rows). ``keep``: one bool per entry.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    rows = len(offsets) - 1
    if len(owners) != int(offsets[-1]) or len(span_offsets) != rows + 1:
        raise ValueError(f"{len(owners)} owners for {int(offsets[-1])} entries, {len(span_offsets) - 1} rows of "
                         f"spans for {rows} rows")
    spans: np.ndarray = np.asarray(span_offsets, dtype=np.int64)
    row_of_entry = np.repeat(np.arange(rows), offsets[1:] - offsets[:-1])
    row_of_span = np.repeat(np.arange(rows), spans[1:] - spans[:-1])
    if len(owners) and (int(owners.max()) >= len(row_of_span) or (row_of_span[owners] != row_of_entry).any()):
        raise ValueError("an entry's sample is not in the entry's row")
    keep = ~np.asarray(deny, dtype=bool)[owners] if len(owners) else np.ones(0, dtype=bool)
    out = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of_entry[keep], minlength=rows), out=out[1:])
    return keep, out
