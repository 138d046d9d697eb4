"""The bulk path's take, all or nothing: what ``take_tokens`` of every source with one shares.

A source's walk reads the next documents' tokens and moves its position past
them, unit by unit. :func:`take_all_or_nothing` runs it so that a walk that
declines (a document the per-record path must read) or fails (a short read, a
lost file) leaves the position where it was: nothing taken, and a retry reads
the same documents. A walk that succeeds is joined into one flat array plus
int64 offsets and counted in the source's stats, with the documents' ids
(``transforms.provenance.doc_ids``: unit key, record, start) when the walk
gives them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from torch_tgb.sources._base import UnitSource

__all__ = ["Taken", "take_all_or_nothing"]

#: a walk's documents: their tokens (one array per read), lengths (one array per read) and ids (one ``[n, 3]``
#: array per read: ``transforms.provenance.doc_ids``)
Taken = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]


def take_all_or_nothing(
    source: UnitSource, walk: Callable[[], Taken | None], dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``walk()``'s documents as ``(flat tokens, int64 offsets, ids [n, 3])``; None, the position unchanged, if it
    declines."""
    saved = source._position()
    try:
        taken = walk()
    except BaseException:
        source._set_position(saved)
        raise
    if taken is None:
        source._set_position(saved)
        return None
    flats, counts, ids = taken
    lengths = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    source._records_out += len(lengths)
    source._tokens_out += int(offsets[-1])
    flat = flats[0] if len(flats) == 1 else np.concatenate(flats) if flats else np.zeros(0, dtype=dtype)
    joined = np.concatenate(ids) if ids else np.zeros((0, 3), dtype=np.int64)
    return flat, offsets, joined
