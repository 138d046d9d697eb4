"""The dtype codes of the TGB footer: one byte per tensor, stable forever.

A code is never reused or renumbered; new dtypes get new codes. ``bfloat16``
has no numpy equivalent, so it is decoded through ``int16`` and reinterpreted
in torch (a view, not a copy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["DTYPES", "DType", "cast_integers", "dtype_by_code", "dtype_by_name", "dtype_of_tensor", "is_integer"]


@dataclass(frozen=True)
class DType:
    code: int
    name: str
    torch_dtype: torch.dtype
    #: numpy dtype the bytes are read as; for bfloat16 a same-size stand-in
    numpy_dtype: np.dtype
    #: True when ``numpy_dtype`` is only a stand-in and torch must ``.view()`` it
    needs_view: bool = False

    @property
    def itemsize(self) -> int:
        return int(self.numpy_dtype.itemsize)


DTYPES: tuple[DType, ...] = (
    DType(0, "bool", torch.bool, np.dtype(np.bool_)),
    DType(1, "uint8", torch.uint8, np.dtype(np.uint8)),
    DType(2, "int8", torch.int8, np.dtype(np.int8)),
    DType(3, "int16", torch.int16, np.dtype("<i2")),
    DType(4, "int32", torch.int32, np.dtype("<i4")),
    DType(5, "int64", torch.int64, np.dtype("<i8")),
    DType(6, "uint16", torch.uint16, np.dtype("<u2")),
    DType(7, "uint32", torch.uint32, np.dtype("<u4")),
    DType(8, "float16", torch.float16, np.dtype("<f2")),
    DType(9, "bfloat16", torch.bfloat16, np.dtype("<i2"), needs_view=True),
    DType(10, "float32", torch.float32, np.dtype("<f4")),
    DType(11, "float64", torch.float64, np.dtype("<f8")),
    DType(12, "uint64", torch.uint64, np.dtype("<u8")),
)

_BY_CODE = {d.code: d for d in DTYPES}
_BY_NAME = {d.name: d for d in DTYPES}
_BY_TORCH = {d.torch_dtype: d for d in DTYPES}


def dtype_by_code(code: int) -> DType | None:
    return _BY_CODE.get(code)


def dtype_by_name(name: str) -> DType | None:
    return _BY_NAME.get(name)


def dtype_of_tensor(dtype: torch.dtype) -> DType | None:
    return _BY_TORCH.get(dtype)


def is_integer(dtype: torch.dtype) -> bool:
    """Whether a ``dtype`` cast (``ReaderOptions.dtype``, e.g. token ids to int64) applies: not float, complex or bool."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def cast_integers(
    tensors: dict[str, torch.Tensor], dtype: torch.dtype | None, skip: frozenset[str] = frozenset()
) -> dict[str, torch.Tensor]:
    """Integer tensors cast to ``dtype`` (a copy); others, and those named in ``skip``, as they are.

    ``None``: unchanged. Readers skip ragged keys and their offsets (pixel
    patches stay uint8, offsets int64): the cast is for dense token ids.
    """
    if dtype is None:
        return tensors
    return {k: t.to(dtype) if is_integer(t.dtype) and k not in skip else t for k, t in tensors.items()}
