"""TokenFile: a flat token array on local disk, memory-mapped, cut into documents.

Files:

- ``.npy``: a 1-D array of uint16, int32, uint32 or int64 tokens (dtype read
  from the header; ``dtype=`` given too must agree).
- ``.bin`` (any other suffix): raw little-endian tokens, no header; ``dtype=``
  is required and the size must be a multiple of its item size.
- offsets (``offsets=``: an array or the path of a ``.idx``/``.npy`` file): a
  1-D ``.npy`` of int64 boundaries, ``offsets[0] == 0``, non-decreasing,
  ``offsets[-1] ==`` the token count; document k is
  ``tokens[offsets[k]:offsets[k+1]]``. (Megatron's binary ``.idx`` is not this
  format.) Without offsets the file is cut into documents of
  ``chunk_tokens`` tokens (the last one shorter).

Units of sharding are groups of ``docs_per_unit`` consecutive documents (1 by
default: every epoch is a full permutation of the documents). Both files are
opened with ``np.memmap``/``np.load(mmap_mode="r")``; nothing is loaded whole
and each document is copied out as it is yielded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import TOKEN_DTYPES, Document, ReadOptions, UnitSource, as_tokens
from torch_tgb.transforms.tokens import offsets_problem

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
        path: str | os.PathLike[str],
        *,
        offsets: str | os.PathLike[str] | npt.ArrayLike | None = None,
        dtype: npt.DTypeLike | None = None,
        chunk_tokens: int = 2048,
        docs_per_unit: int = 1,
        **options: Unpack[ReadOptions],
    ) -> None:
        super().__init__(**options)
        if chunk_tokens < 1 or docs_per_unit < 1:
            raise ValueError(f"chunk_tokens and docs_per_unit must be >= 1, got {chunk_tokens=} {docs_per_unit=}")
        self.path = os.fspath(path)
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.chunk_tokens = chunk_tokens
        self.docs_per_unit = docs_per_unit
        self._offsets_arg = offsets if offsets is None or isinstance(offsets, (str, os.PathLike)) else np.asarray(offsets)
        self._handles: dict[str, np.ndarray] = {}
        tokens = self._tokens()
        bounds = self._bounds()
        if bounds is not None:
            self.num_docs = len(bounds) - 1
            _check_offsets(bounds, len(tokens), self._offsets_name())
        else:
            self.num_docs = -(-len(tokens) // chunk_tokens)
        self._set_num_units(-(-self.num_docs // docs_per_unit), self.path)

    def _offsets_name(self) -> str:
        arg = self._offsets_arg
        return os.fspath(arg) if isinstance(arg, (str, os.PathLike)) else f"offsets of {self.path}"

    def _tokens(self) -> np.ndarray:
        if "tokens" not in self._handles:
            self._handles["tokens"] = _open_tokens(self.path, self.dtype)
        return self._handles["tokens"]

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

    def _unit_length(self, unit: int) -> int:
        return min(self.docs_per_unit, self.num_docs - unit * self.docs_per_unit)

    def _records(self, unit: int, start: int) -> Iterator[Document | SourceError]:
        tokens, bounds = self._tokens(), self._bounds()
        first = unit * self.docs_per_unit
        for doc in range(first + start, first + self._unit_length(unit)):
            if bounds is not None:
                lo, hi = int(bounds[doc]), int(bounds[doc + 1])
            else:
                lo, hi = doc * self.chunk_tokens, min((doc + 1) * self.chunk_tokens, len(tokens))
            out = as_tokens(tokens[lo:hi], f"{self.path} document {doc}")
            yield out if isinstance(out, SourceError) else {"tokens": out}  # e.g. a negative id: on_error decides


def _open_tokens(path: str, dtype: np.dtype | None) -> np.ndarray:
    if not os.path.isfile(path):
        raise SourceError(f"{path}: no such token file")
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
        if f.read(len(_MEGATRON_MAGIC)) == _MEGATRON_MAGIC:
            raise SourceError(f"{path}: a Megatron .idx file; offsets must be a .npy array of int64 boundaries")
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise SourceError(f"{path}: not a .npy offsets array: {e}") from e


def _check_offsets(bounds: np.ndarray, num_tokens: int, where: str) -> None:
    problem = offsets_problem(bounds, num_tokens)  # the rule write_dataset applies too
    if problem is not None:
        raise SourceError(f"{where}: {problem}")
