"""Rewriting one TGB without some records: decode every slice, rejoin the global batch, excise, cut again.

The rewritten TGB has the same layout, the same rows in the same places,
the same keys and dtypes; only the rows that held a denied record change
(``transforms.excision``: re-packed in place). cp slices are joined back
into whole rows (contiguous or zig-zag, with the token after each chunk of
a ``labels_from`` key) before the excision and cut again after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from torch_tgb.errors import ProvenanceError
from torch_tgb.format import decode_slice, writable
from torch_tgb.layout import Layout, RaggedRows, SliceData, offsets_key
from torch_tgb.layout._cp import cp_ranges
from torch_tgb.lineage._read import footer_of
from torch_tgb.manifest import TGBEntry
from torch_tgb.storage import ObjectStore
from torch_tgb.transforms.derive import SEQ_LENS_KEY
from torch_tgb.transforms.excision import entry_owners, excise_array_rows, excise_token_rows, kept_entries, key_owners
from torch_tgb.transforms.provenance import COUNTS_KEY, PROVENANCE_KEY, media_keys, record_hash
from torch_tgb.transforms.sample_keys import SAMPLE_KEYS

__all__ = ["Rewritten", "read_batch", "rewrite"]

#: per-token row keys ``excise_array_rows`` rewrites (anything else per token cannot be excised)
ARRAY_KEYS = ("input_ids", "labels", "document_ids", "position_ids", "cu_seqlens", "max_seqlen")
#: per-row keys carried unchanged through an excision
ROW_KEYS = ("row_index", "row_cost")


@dataclass(frozen=True)
class Rewritten:
    """A TGB's slices after excision, and what went: ``(record hash, dp, row)`` of each span removed."""

    slices: list[SliceData]
    removed: list[tuple[int, int, int]]
    tokens: int


def read_batch(store: ObjectStore, entry: TGBEntry, layout: Layout) -> dict[str, torch.Tensor | RaggedRows]:
    """The global batch a TGB holds: every slice decoded (CRC-checked) and joined back (dp rows, cp chunks)."""
    footer = footer_of(store, entry)
    data = writable(store.get_range(entry.key, entry.start, entry.size))
    by_dp: list[list[dict[str, torch.Tensor]]] = []
    for d in range(footer.dp):
        by_dp.append([decode_slice(data, footer.slice(d, c), base_offset=entry.start, key=entry.key)
                      for c in range(footer.cp)])
    ragged = set(footer.ragged)
    batch: dict[str, torch.Tensor | RaggedRows] = {}
    for name in by_dp[0][0]:
        if name.endswith("_offsets") and name[: -len("_offsets")] in ragged:
            continue
        if name in ragged:
            values = torch.cat([parts[0][name] for parts in by_dp])
            lengths = np.concatenate([np.diff(parts[0][offsets_key(name)].numpy()) for parts in by_dp])
            batch[name] = RaggedRows.from_lengths(values.clone(), lengths)
        else:
            rows = [_join_cp([p[name] for p in parts], name, layout) for parts in by_dp]
            batch[name] = torch.cat(rows).clone()
    return batch


def _join_cp(chunks: list[torch.Tensor], name: str, layout: Layout) -> torch.Tensor:
    """A dp part's whole rows of seq key ``name`` from its cp slices (the inverse of ``Layout.cut``)."""
    if layout.cp == 1 or name not in layout.seq_keys:
        return chunks[0]
    ranges = cp_ranges(layout.cp, layout.cp_order)
    more = int(name == layout.labels_from)
    held = sum(hi - lo for lo, hi in ranges[0])
    n = int((chunks[0].shape[1] - more * len(ranges[0])) / held)
    out = chunks[0].new_empty((chunks[0].shape[0], n + more, *chunks[0].shape[2:]))
    for c, stored in enumerate(chunks):
        at = 0
        for lo, hi in ranges[c]:
            a, b = int(lo * n), int(hi * n)
            out[:, a:b] = stored[:, at : at + b - a]
            if more and hi == Fraction(1):
                out[:, n] = stored[:, at + b - a]
            at += b - a + more
    return out


def rewrite(store: ObjectStore, entry: TGBEntry, layout: Layout, deny: np.ndarray) -> Rewritten:
    """The slices of ``entry``'s TGB without the spans whose record hash is in ``deny`` (sorted uint64)."""
    batch = read_batch(store, entry, layout)
    prov = batch.get(PROVENANCE_KEY)
    if not isinstance(prov, RaggedRows):
        raise ProvenanceError(f"object {entry.key!r}: its TGB carries no provenance: nothing can be excised")
    values = prov.values.numpy().reshape(-1, 3)
    offsets = prov.offsets.numpy()
    hashes = record_hash(values[:, 0], values[:, 1]) if len(values) else np.zeros(0, np.uint64)
    hit = np.isin(hashes, deny)
    rows = len(offsets) - 1
    per = rows // layout.dp
    row_of = np.repeat(np.arange(rows), np.diff(offsets))
    removed = [(int(h), int(r) // per, int(r) % per) for h, r in zip(hashes[hit].tolist(), row_of[hit].tolist())]
    if not hit.any():
        return Rewritten(layout.cut(batch), [], 0)
    out = dict(batch)
    if SEQ_LENS_KEY in batch and layout.labels_from is not None:
        tokens = batch[layout.labels_from]
        seq = batch[SEQ_LENS_KEY]
        assert isinstance(tokens, torch.Tensor) and isinstance(seq, RaggedRows)
        done = excise_token_rows(tokens.numpy(), (seq.values.numpy(), seq.offsets.numpy()), (values, offsets), hit,
                                 pad_id=int(tokens[0, -1]) if len(tokens) else 0)
        out[layout.labels_from] = torch.from_numpy(done.arrays["input_ids"])
        assert done.seq_lens is not None
        out[SEQ_LENS_KEY] = RaggedRows.from_lengths(torch.from_numpy(done.seq_lens[0]), np.diff(done.seq_lens[1]))
    else:
        owners = _check_array_keys(batch, entry, len(values))
        arrays = {k: t.numpy() for k, t in batch.items() if k in ARRAY_KEYS and isinstance(t, torch.Tensor)}
        pad = arrays["input_ids"][arrays["document_ids"] < 0]
        done = excise_array_rows(arrays, (values, offsets), hit, pad_id=int(pad[0]) if len(pad) else 0)
        out.update({k: torch.from_numpy(v) for k, v in done.arrays.items()})
        for name, owner in owners.items():  # a sample's patches, grids, states and key go with its tokens
            rag = batch[name]
            assert isinstance(rag, RaggedRows)
            try:
                keep, kept = kept_entries(rag.offsets.numpy(), owner, hit, offsets)
            except ValueError as e:
                raise ProvenanceError(f"object {entry.key!r}: {name!r} does not match its rows' {COUNTS_KEY!r} ({e}): "
                                      "nothing was excised") from e
            out[name] = RaggedRows.from_lengths(rag.values[torch.from_numpy(keep)].clone(), np.diff(kept))
    kept_values, kept_offsets = done.provenance
    out[PROVENANCE_KEY] = RaggedRows.from_lengths(torch.from_numpy(kept_values), np.diff(kept_offsets))
    return Rewritten(layout.cut(out), removed, done.tokens)


def _check_array_keys(batch: Mapping[str, object], entry: TGBEntry, spans: int) -> dict[str, np.ndarray]:
    """The span owning each entry of every ragged key of per-token rows (media rows: ``PackSamples``'s), by key;
    a ProvenanceError where an excision cannot keep the rows right (a key it does not know; media rows written
    before ``provenance_counts`` said which entries are whose)."""
    known = (*ARRAY_KEYS, *ROW_KEYS, PROVENANCE_KEY, SEQ_LENS_KEY, COUNTS_KEY, SAMPLE_KEYS)
    dense = [k for k, v in batch.items() if isinstance(v, torch.Tensor) and k not in known]
    if dense or "document_ids" not in batch:
        raise ProvenanceError(
            f"object {entry.key!r}: rows with {sorted(dense) or 'no document_ids'} cannot be excised (an excision "
            "rewrites token rows, and per-token rows of input_ids/labels/document_ids/position_ids with their "
            "samples' ragged keys); rewrite the namespace without the records instead"
        )
    media = media_keys(k for k, v in batch.items() if isinstance(v, RaggedRows))
    counts = batch.get(COUNTS_KEY)
    if media and not isinstance(counts, RaggedRows):
        raise ProvenanceError(
            f"object {entry.key!r}: its rows hold samples' {list(media)} but no {COUNTS_KEY!r} (written before "
            "PackSamples recorded which entries are each sample's), so an excision cannot tell the record's pixels "
            "from its neighbours'. To remove the records: produce the affected steps again from sources without "
            "them (a namespace written now records the counts and can be excised), or rewrite the namespace "
            "without them"
        )
    owners: dict[str, np.ndarray] = {}
    if isinstance(counts, RaggedRows):
        table = counts.values.numpy().reshape(spans, -1) if spans else counts.values.numpy().reshape(0, len(media))
        if table.shape != (spans, len(media)):
            raise ProvenanceError(f"object {entry.key!r}: {COUNTS_KEY!r} has {table.shape[1]} columns for the media "
                                  f"keys {list(media)}: nothing was excised")
        owners = {name: entry_owners(table[:, j]) for j, name in enumerate(media)}
        owners[COUNTS_KEY] = np.arange(spans, dtype=np.int64)
    keys = batch.get(SAMPLE_KEYS)
    if isinstance(keys, RaggedRows):
        try:
            owners[SAMPLE_KEYS] = key_owners(keys.values.numpy(), spans)
        except ValueError as e:
            raise ProvenanceError(f"object {entry.key!r}: {SAMPLE_KEYS!r}: {e}: nothing was excised") from e
    return owners
