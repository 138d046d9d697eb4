"""Ragged keys: a tensor per row with its own length along dim 0, stored as values plus offsets.

A global batch may hold, besides dense tensors (dim 0 = the batch), ragged
keys: a list of one tensor per row, ``row_i`` of shape ``[n_i, *trailing]``
(``n_i`` may be 0; the same dtype and trailing dims in every row). A slice
stores the rows it holds as one values tensor (the rows concatenated in row
order, ``[Σ n_i, *trailing]``) under the key and their offsets (int64
``[rows + 1]``, from 0: the ``cu_seqlens`` convention) under
``key + "_offsets"``: row ``r`` is ``values[offsets[r]:offsets[r + 1]]``.
A dp slice's rows are contiguous, so a rank's ragged bytes are still one
range read. Ragged keys are never split along a sequence: every cp slice of a
dp part repeats them. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import overload

import numpy as np
import torch

from torch_tgb.errors import LayoutError

__all__ = [
    "OFFSETS_SUFFIX",
    "RaggedRows",
    "check_offsets",
    "check_ragged",
    "join_ragged",
    "offsets_key",
    "ragged_part",
]

#: a ragged key's offsets are stored and delivered under ``key + OFFSETS_SUFFIX``
OFFSETS_SUFFIX = "_offsets"


def offsets_key(key: str) -> str:
    """Where ragged ``key``'s offsets are stored and delivered."""
    return key + OFFSETS_SUFFIX


class RaggedRows(Sequence[torch.Tensor]):
    """Rows of a ragged key held joined: row ``r`` is ``values[offsets[r]:offsets[r + 1]]`` (a view).

    ``values``: ``[Σ n_r, *trailing]``, any dtype; ``offsets``: int64
    ``[rows + 1]`` from 0, non-decreasing, ending at ``values.shape[0]``
    (checked here, once). A slice of rows is a ``RaggedRows`` of views, its
    offsets from 0 again. Equal rows make an equal batch whether a ragged key
    is given this way or as a list of its rows.
    """

    __slots__ = ("_bounds", "offsets", "values")

    def __init__(self, values: torch.Tensor, offsets: torch.Tensor) -> None:
        if not isinstance(values, torch.Tensor) or values.dim() < 1:
            raise LayoutError(f"RaggedRows: values must be a tensor with an item dim 0, got {_describe(values)}")
        if not isinstance(offsets, torch.Tensor) or offsets.dtype != torch.int64:
            raise LayoutError(f"RaggedRows: offsets must be an int64 tensor, got {_describe(offsets)}")
        self._set(values, offsets, _bounds(values, offsets.detach().cpu().numpy()))

    @classmethod
    def from_lengths(cls, values: torch.Tensor, lengths: Sequence[int] | np.ndarray) -> RaggedRows:
        """Rows of ``lengths[r]`` items each, in order, over ``values``."""
        counts = np.asarray(lengths, dtype=np.int64)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(values, torch.from_numpy(offsets))

    def _set(self, values: torch.Tensor, offsets: torch.Tensor, bounds: list[int]) -> None:
        """Hold ``values`` cut at ``offsets`` (``bounds``: the same as a list), already checked."""
        self.values = values
        self.offsets = offsets
        self._bounds = bounds

    @classmethod
    def from_rows(cls, name: str, rows: Sequence[torch.Tensor]) -> RaggedRows:
        """Rows given one tensor each (checked as :func:`check_ragged` checks them, naming key ``name``), joined."""
        check_ragged(name, rows)
        return cls(*ragged_part(rows))

    def __len__(self) -> int:
        return len(self._bounds) - 1

    @property
    def nbytes(self) -> int:
        """The bytes of the values and the offsets (what the rows take in a TGB, before alignment)."""
        return int(self.values.nbytes + self.offsets.nbytes)

    @overload
    def __getitem__(self, index: int) -> torch.Tensor: ...

    @overload
    def __getitem__(self, index: slice) -> RaggedRows: ...

    def __getitem__(self, index: int | slice) -> torch.Tensor | RaggedRows:
        if isinstance(index, slice):
            first, stop, step = index.indices(len(self))
            if step != 1:
                raise LayoutError("RaggedRows: a slice of rows must be contiguous (step 1)")
            stop = max(first, stop)
            if first == 0 and stop == len(self):  # every row: these rows, as a tuple's full slice is the tuple
                return self
            a, b = self._bounds[first], self._bounds[stop]
            part = RaggedRows.__new__(RaggedRows)  # a slice of checked offsets is valid: not checked again
            bounds = [x - a for x in self._bounds[first : stop + 1]]
            part._set(self.values[a:b], self.offsets[first : stop + 1] - a, bounds)
            return part
        row = range(len(self))[index]  # IndexError past the end, negative from the end
        return self.values[self._bounds[row] : self._bounds[row + 1]]

    def __repr__(self) -> str:
        return f"RaggedRows({len(self)} rows, values {tuple(self.values.shape)} {self.values.dtype})"


def _bounds(values: torch.Tensor, offsets: np.ndarray) -> list[int]:
    """``offsets`` as a list, once :func:`check_offsets` finds nothing wrong with them (else LayoutError)."""
    problem = check_offsets(int(values.shape[0]), offsets, None)
    if problem is not None:
        raise LayoutError(f"RaggedRows: {problem}")
    bounds: list[int] = offsets.tolist()
    return bounds


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {tuple(value.shape)}"
    return type(value).__name__


def check_ragged(name: str, rows: Sequence[torch.Tensor]) -> int:
    """The number of rows of ragged key ``name``; LayoutError unless every row is a tensor of one kind."""
    if not rows:
        raise LayoutError(f"ragged key {name!r}: a global batch needs at least one row")
    if isinstance(rows, RaggedRows):  # one tensor for every row: checked when it was made
        return len(rows)
    first = rows[0]
    for i, row in enumerate(rows):
        if not isinstance(row, torch.Tensor):
            raise LayoutError(f"ragged key {name!r}, row {i}: expected a torch.Tensor, got {type(row).__name__}")
        if row.dim() < 1:
            raise LayoutError(f"ragged key {name!r}, row {i}: a 0-dim tensor has no item dim 0")
        if row.dtype != first.dtype or row.shape[1:] != first.shape[1:]:
            raise LayoutError(
                f"ragged key {name!r}, row {i}: {row.dtype} {tuple(row.shape)}; row 0 is {first.dtype} "
                f"{tuple(first.shape)} (every row needs the same dtype and trailing dims)"
            )
    return len(rows)


def ragged_part(rows: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, offsets)`` of consecutive rows (at least one): the rows concatenated, and int64 offsets from 0."""
    if not rows:
        raise LayoutError("a ragged part needs at least one row")
    if isinstance(rows, RaggedRows):
        return rows.values.detach().cpu(), rows.offsets.detach().cpu()
    lengths = torch.tensor([int(r.shape[0]) for r in rows], dtype=torch.int64)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    values = torch.cat([r.detach().cpu() for r in rows], dim=0)
    return values, offsets


def check_offsets(values_rows: int, offsets: np.ndarray, rows: int | None) -> str | None:
    """What is wrong with a slice's ragged ``offsets`` (None: nothing): untrusted bytes, checked before any use.

    They must be one int64 per row plus one, start at 0, never decrease, and end
    at ``values_rows`` (the values' dim 0); ``rows`` is the slice's row count
    where another key tells it (None: any).
    """
    if offsets.ndim != 1 or len(offsets) < 1:
        return f"offsets of shape {tuple(offsets.shape)} (need [rows + 1])"
    if rows is not None and len(offsets) != rows + 1:
        return f"{len(offsets)} offsets for {rows} rows (need rows + 1)"
    if int(offsets[0]) != 0:
        return f"offsets start at {int(offsets[0])}, not 0"
    if len(offsets) > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        return "offsets decrease"
    if int(offsets[-1]) != values_rows:
        return f"offsets end at {int(offsets[-1])}, the values hold {values_rows} items"
    return None


def join_ragged(parts: Sequence[Mapping[str, torch.Tensor]], key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged ``key`` of several slices joined in order: values concatenated, offsets shifted and concatenated."""
    off = offsets_key(key)
    values = torch.cat([p[key] for p in parts], dim=0)
    offsets, base = [parts[0][off]], int(parts[0][off][-1])
    for p in parts[1:]:
        offsets.append(p[off][1:] + base)
        base += int(p[off][-1])
    return values, torch.cat(offsets)
