"""The dtype codes of the TGB footer: one byte per tensor, stable forever.

A code is never reused or renumbered; new dtypes get new codes. ``bfloat16``
has no numpy equivalent, so it is decoded through ``int16`` and reinterpreted
in torch (a view, not a copy).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from torch_tgb.errors import SchemaMismatch

__all__ = [
    "DTYPES", "DType", "cast_integers", "cast_tensor", "dtype_by_code", "dtype_by_name", "dtype_of_tensor", "is_integer",
    "narrowing_problem",
]


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


@functools.lru_cache(maxsize=None)
def is_integer(dtype: torch.dtype) -> bool:
    """Whether a ``dtype`` cast (``ReaderOptions.dtype``, e.g. token ids to int64) applies: not float, complex or bool."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def cast_integers(
    tensors: dict[str, torch.Tensor], dtype: torch.dtype | None, skip: frozenset[str] = frozenset()
) -> dict[str, torch.Tensor]:
    """Integer tensors cast to ``dtype`` (a copy); others, and those named in ``skip``, as they are.

    ``None``: unchanged. Readers skip ragged keys and their offsets (pixel
    patches stay uint8, offsets int64): the cast is for dense token ids. A cast
    that would change a value (a narrower dtype that cannot hold it: uint32 ids
    >= 2**31 as int32, ``-100`` labels as uint32) raises :class:`SchemaMismatch`
    naming the tensor; only such narrowing casts look at the values.
    """
    return tensors if dtype is None else IntegerCast(dtype, skip)(tensors)


#: what a cast does to one tensor: leave it, ``.to`` (every value fits), ``.to`` after a look at the values
KEEP, WIDEN, CHECK = 0, 1, 2


def cast_rule(source: torch.dtype, dtype: torch.dtype) -> int:
    """:data:`KEEP`, :data:`WIDEN` or :data:`CHECK`: how :func:`cast_integers` casts a ``source`` tensor. Pure."""
    if source == dtype or not is_integer(source):
        return KEEP
    return CHECK if _checked_target(dtype) and _holds(dtype, source) is not None else WIDEN


class IntegerCast:
    """:func:`cast_integers` to ``dtype``, leaving ``skip``, with each (key, dtype) rule worked out once.

    The reader casts every step through one of these: a dict lookup per tensor
    on top of the copy.
    """

    __slots__ = ("_rules", "dtype", "skip")

    def __init__(self, dtype: torch.dtype, skip: frozenset[str] = frozenset()) -> None:
        self.dtype, self.skip = dtype, skip
        self._rules: dict[str, tuple[torch.dtype, int]] = {}  # key -> (the dtype it came as, its rule)

    def rule(self, name: str, source: torch.dtype) -> int:
        """How key ``name``, read as ``source``, is cast: :data:`KEEP`, :data:`WIDEN` or :data:`CHECK`."""
        return KEEP if name in self.skip else cast_rule(source, self.dtype)

    def __call__(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        dtype, rules, out = self.dtype, self._rules, {}
        for name, t in tensors.items():
            source = t.dtype
            known = rules.get(name)
            if known is None or known[0] is not source:
                known = rules[name] = (source, self.rule(name, source))
            rule = known[1]
            out[name] = t if rule == KEEP else t.to(dtype) if rule == WIDEN else cast_tensor(name, t, dtype)
        return out


def cast_tensor(name: str, tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor`` (named ``name``) cast to ``dtype``; :class:`SchemaMismatch` if that changes a value."""
    problem = narrowing_problem(tensor, dtype)
    if problem is not None:
        raise SchemaMismatch(f"cannot read {name!r} ({str(tensor.dtype).removeprefix('torch.')}) as {dtype}: {problem}")
    return tensor.to(dtype)


def _checked_target(dtype: torch.dtype) -> bool:
    """Whether integers cast to ``dtype`` can change: an integer dtype (wraps) or a floating one (rounds)."""
    return is_integer(dtype) or dtype.is_floating_point


@functools.lru_cache(maxsize=None)
def _holds(target: torch.dtype, source: torch.dtype) -> tuple[int, int] | None:
    """``None`` if every ``source`` value fits ``target`` (a widening cast), else ``target``'s range.

    A floating ``target``'s range is where it holds every integer exactly
    (float16: ±2048, bfloat16: ±256, float32: ±2**24): past it, ids round.
    """
    if target.is_floating_point:
        exact = int(2 / torch.finfo(target).eps)
        lo, hi = -exact, exact
    else:
        lo, hi = int(torch.iinfo(target).min), int(torch.iinfo(target).max)
    src = torch.iinfo(source)
    return None if lo <= int(src.min) and int(src.max) <= hi else (lo, hi)


def _min_max(values: torch.Tensor) -> tuple[int, int]:
    if values.device.type == "cpu":  # numpy reduces every integer width, unsigned 64-bit included
        array = values.numpy()
        return int(array.min()), int(array.max())
    low, high = torch.aminmax(values if values.dtype == torch.int64 else values.to(torch.int64))
    return int(low), int(high)


def narrowing_problem(values: torch.Tensor, dtype: torch.dtype) -> str | None:
    """Why casting integer ``values`` to ``dtype`` would change a value (wrap or round), or ``None``.

    Only a cast to a dtype whose range does not hold the source dtype's range
    looks at the values (one min/max pass): widening casts cost a cache lookup.
    A floating ``dtype`` holds the integers of its exact range (:func:`_holds`).
    """
    if values.dtype == dtype or not (is_integer(values.dtype) and _checked_target(dtype)):
        return None
    bounds = _holds(dtype, values.dtype)
    if bounds is None or values.numel() == 0:
        return None
    lo, hi = bounds
    low, high = _min_max(values)
    if low < lo or high > hi:
        bad = high if high > hi else low
        if dtype.is_floating_point:
            return (f"a value {bad} is past {str(dtype).removeprefix('torch.')}'s exact integers ({lo}..{hi}): "
                    "the cast would round it")
        return f"a value {bad} does not fit {str(dtype).removeprefix('torch.')} ({lo}..{hi}): the cast would change it"
    return None
