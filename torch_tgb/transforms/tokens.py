"""The rules every path that takes token ids applies: sources, ``write_dataset``, the CLI.

Pure functions returning *why not* (a message) or ``None``, so that each
caller raises its own error type (a source's :class:`SourceError`, naming the
file and record; ``write_dataset``'s ``ValueError``) with one wording:

- :func:`token_ids_problem`: token ids are integers ``>= 0`` (``-100`` is
  the label ignore index, never a token);
- :func:`offsets_problem`: document offsets are integers from 0 to the token
  count, non-decreasing, compared as numbers (a uint64 offset above 2**63
  wraps around in int64 arithmetic and would pass a naive check).

The third rule, that a cast to a narrower integer dtype keeps every value, is
``torch_tgb.format.narrowing_problem``: the reader's cast applies it too.
"""

from __future__ import annotations

import numpy as np

__all__ = ["offsets_problem", "token_ids_problem"]


def token_ids_problem(values: np.ndarray) -> str | None:
    """Why ``values`` are not token ids (integers ``>= 0``), or ``None``."""
    if values.dtype.kind not in "iu":
        return f"token ids must be integers, got dtype {values.dtype}"
    if values.dtype.kind == "i" and values.size:
        low = int(values.min())
        if low < 0:
            return f"token ids must be >= 0, got {low}" + (" (-100 is the label ignore index, not a token)"
                                                           if low == -100 else "")
    return None


def offsets_problem(offsets: np.ndarray, num_tokens: int, *, min_boundaries: int = 2) -> str | None:
    """Why ``offsets`` are not document boundaries of ``num_tokens`` tokens, or ``None``.

    Boundaries are compared as Python integers' worth: nothing above
    ``num_tokens`` (nor below 0) is accepted before any int64 arithmetic.
    """
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) < min_boundaries:
        return (f"offsets must be a 1-D integer array of >= {min_boundaries} boundaries, "
                f"got {offsets.dtype} of shape {offsets.shape}")
    if len(offsets) == 0:
        return None
    high, low = int(offsets.max()), int(offsets.min())
    if high > num_tokens or low < 0:
        return f"offsets hold {high if high > num_tokens else low} beyond the token count {num_tokens} (0..{num_tokens})"
    bounds = offsets.astype(np.int64)
    if int(bounds[0]) != 0 or int(bounds[-1]) != num_tokens:
        return f"offsets must start at 0 and end at the token count {num_tokens}, got {int(bounds[0])}..{int(bounds[-1])}"
    if bool((np.diff(bounds) < 0).any()):
        return "offsets must be non-decreasing"
    return None
