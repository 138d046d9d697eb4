"""The parsed footer of one TGB object: its slices and tensors, each built when first asked for.

:func:`~torch_tgb.format._footer.parse_footer` checks the footer's tables
vectorised and hands them to a :class:`Footer`; the per-tensor Python
objects of a slice (:class:`SliceInfo`, :class:`TensorInfo`) are built only
when that slice is asked for (:meth:`Footer.slice`), and the shape/length
agreement is checked then.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from torch_tgb.errors import CorruptObject, SchemaMismatch
from torch_tgb.format._codecs import Codec
from torch_tgb.format._contract import Contract
from torch_tgb.format._dtypes import DType, dtype_by_code
from torch_tgb.format._spec import TENSOR_ALIGN
from torch_tgb.layout import Layout, offsets_key

__all__ = ["Footer", "PlanRow", "RaggedCheck", "SliceInfo", "TensorInfo", "ragged_checks"]

#: one tensor of a slice's decode plan: (name, numpy dtype, count, offset, shape, torch view dtype or None, crc32c)
PlanRow = tuple[str, "np.dtype[Any]", int, int, tuple[int, ...], "torch.dtype | None", int]


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of one slice; ``offset`` is absolute within the object.

    ``offset``, ``length`` and ``crc32c`` are those of the stored bytes; ``codec``: how they are compressed
    (None: stored as they are, ``length == nbytes``; format version 4, ``_codecs.py``).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    length: int
    crc32c: int
    _dt: DType = field(repr=False, compare=False)
    codec: Codec | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor as read (its shape's): ``length`` unless it is stored compressed."""
        return self.length if self.codec is None else math.prod(self.shape) * self._dt.itemsize


@dataclass(frozen=True)
class SliceInfo:
    """One (dp, cp) slice: the byte range ``[start, end)`` holding its tensors.

    ``ragged``: the ragged keys among them (each with its ``_offsets`` tensor),
    whose offsets a reader checks before handing them out.
    """

    dp: int
    cp: int
    start: int
    end: int
    tensors: tuple[TensorInfo, ...]
    ragged: tuple[str, ...] = ()

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def coded(self) -> bool:
        """Whether a tensor of the slice is stored compressed (reading it decodes into a fresh buffer)."""
        return any(t.codec is not None for t in self.tensors)

    @property
    def decoded(self) -> SliceInfo:
        """The slice as a plain read of its decoded bytes lays it out: tensors from offset 0, each on
        ``TENSOR_ALIGN``, none compressed (their CRCs are the stored bytes', checked before decoding)."""
        plain = self.__dict__.get("_decoded")
        if plain is None:
            tensors, pos = [], 0
            for t in self.tensors:
                pos += -pos % TENSOR_ALIGN
                tensors.append(TensorInfo(t.name, t.dtype, t.shape, pos, t.nbytes, t.crc32c, t._dt))
                pos += t.nbytes
            plain = SliceInfo(self.dp, self.cp, 0, pos, tuple(tensors), self.ragged)
            object.__setattr__(self, "_decoded", plain)
        return plain

    def select(self, names: frozenset[str]) -> SliceInfo:
        """This slice with only the tensors named in ``names`` (in slice order), spanning just them.

        Reading it reads ``[first selected tensor, end of the last)``: one range
        for any selection, exactly the selected bytes when they are adjacent.
        """
        tensors = tuple(t for t in self.tensors if t.name in names)
        if not tensors:
            raise SchemaMismatch(f"slice (dp={self.dp}, cp={self.cp}) holds none of the keys {sorted(names)}")
        start = min(t.offset for t in tensors)
        end = max(t.offset + t.length for t in tensors)
        return SliceInfo(self.dp, self.cp, start, end, tensors, tuple(k for k in self.ragged if k in names))

    @property
    def decode_plan(self) -> tuple[PlanRow, ...]:
        """Per tensor: (name, numpy dtype, count, offset, shape, torch view dtype or None, crc32c).

        Precomputed once so the read hot path touches plain tuples only.
        """
        plan = self.__dict__.get("_decode_plan")
        if plan is None:
            plan = tuple(
                (
                    t.name,
                    t._dt.numpy_dtype,
                    t.nbytes // t._dt.itemsize,
                    t.offset,
                    t.shape,
                    t._dt.torch_dtype if t._dt.needs_view else None,
                    t.crc32c,
                )
                for t in self.tensors
            )
            object.__setattr__(self, "_decode_plan", plan)
        return plan

    @property
    def ragged_checks(self) -> tuple[RaggedCheck, ...]:
        """Per ragged key: what its offsets must satisfy, worked out once from the shapes (:class:`RaggedCheck`)."""
        checks = self.__dict__.get("_ragged_checks")
        if checks is None:
            checks = ragged_checks(self)
            object.__setattr__(self, "_ragged_checks", checks)
        return checks


@dataclass(frozen=True)
class RaggedCheck:
    """One ragged key of a slice: its offsets tensor, the values' item count and the slice's rows.

    ``problem``: a tensor missing or of the wrong kind (None: the offsets are
    left to :func:`~torch_tgb.layout.check_offsets` on every read of untrusted bytes).
    """

    name: str
    offsets: str
    values_rows: int
    rows: int | None
    problem: str | None


def ragged_checks(info: SliceInfo) -> tuple[RaggedCheck, ...]:
    """The :class:`RaggedCheck` of each of ``info``'s ragged keys: what its tensors' kinds and shapes say, once. Pure.

    The slice's rows are those of its first dense tensor with a dim (else of
    the first ragged key's 1-d offsets), as the tensors read from it will have.
    """
    by_name = {t.name: t for t in info.tensors}
    offsets = {offsets_key(k) for k in info.ragged}
    rows = next((t.shape[0] for t in info.tensors if t.name not in offsets and t.name not in info.ragged
                 and len(t.shape) > 0), None)
    out = []
    for name in info.ragged:
        values, offs = by_name.get(name), by_name.get(offsets_key(name))
        if values is None or offs is None or offs._dt.torch_dtype != torch.int64 or len(values.shape) < 1:
            out.append(RaggedCheck(name, offsets_key(name), 0, rows, "values or int64 offsets missing"))
            continue
        out.append(RaggedCheck(name, offsets_key(name), values.shape[0], rows, None))
        if rows is None and len(offs.shape) == 1:
            rows = offs.shape[0] - 1
    return tuple(out)


class Footer:
    """The parsed footer of one TGB object. Immutable after construction.

    ``contract``: the namespace's :class:`~torch_tgb.format._contract.Contract`
    that the footer was judged by at parse (``parse_footer(contract=)``); each
    slice is judged by it when first asked for, with its shape/length checks,
    so the verdict is cached with the slice. None: the footer is checked only
    against itself (tools reading an object on its own).
    """

    def __init__(
        self,
        *,
        key: str,
        size: int,
        footer_offset: int,
        footer_length: int,
        dp: int,
        cp: int,
        names: tuple[str, ...],
        layout: dict[str, Any] | None,
        schema: dict[str, Any],
        metadata: dict[str, Any],
        slices: np.ndarray,
        tensors: np.ndarray,
        dims: np.ndarray,
        ragged: tuple[str, ...] = (),
        contract: Contract | None = None,
        indices: tuple[int, ...] | None = None,
        version: int = 1,
        codecs: tuple[Codec, ...] = (),
    ) -> None:
        """``indices``: the slices the tables hold (their (dp, cp) indices, in table order) when they hold only
        some (a reader that read its own slices' version-3 records); ``None``: every slice, in order.
        ``codecs``: the footer's codec table (version 4): a tensor row's codec number ``k > 0`` is ``codecs[k - 1]``."""
        self.key = key
        #: the TGB format version of the footer (3: its tables are slice records, ``_records.py``; 4: the same,
        #: with tensors stored compressed, ``_codecs.py``)
        self.version = version
        self.codecs = codecs
        self.size = size
        self.footer_offset = footer_offset
        self.footer_length = footer_length
        self.dp = dp
        self.cp = cp
        self.names = names
        self.layout = layout
        self.schema = schema
        self.metadata = metadata
        self._slices = slices
        self._tensors = tensors
        self._dims = dims
        #: ragged keys (stored as values under the name and offsets under name + "_offsets")
        self.ragged = ragged
        self.contract = contract
        # built on first use; a benign race between threads builds equal objects
        self._cache: dict[int, SliceInfo] = {}
        self._selected: dict[tuple[int, frozenset[str]], SliceInfo] = {}
        self._rows = None if indices is None else {index: row for row, index in enumerate(indices)}

    @property
    def num_slices(self) -> int:
        return self.dp * self.cp

    @property
    def held(self) -> frozenset[int] | None:
        """The (dp, cp) indices of the slices this footer holds, when it holds only some (else None: all)."""
        return None if self._rows is None else frozenset(self._rows)

    def slice(self, dp: int, cp: int = 0, names: frozenset[str] | None = None) -> SliceInfo:
        """The slice for data-parallel part ``dp`` and context-parallel part ``cp`` (``names``: only those tensors)."""
        if not (0 <= dp < self.dp and 0 <= cp < self.cp):
            raise CorruptObject(
                f"object {self.key!r}: no slice (dp={dp}, cp={cp}); it has dp={self.dp}, cp={self.cp}"
            )
        index = dp * self.cp + cp
        info = self._cache.get(index)
        if info is None:
            row = index if self._rows is None else self._rows.get(index)
            if row is None:
                raise CorruptObject(f"object {self.key!r}: slice (dp={dp}, cp={cp}) was not read (this reader "
                                    f"holds the slice records of {sorted(self._rows or ())})")
            info = self._build(row)
            self._cache[index] = info
        if names is None:
            return info
        selected = self._selected.get((index, names))
        if selected is None:
            selected = self._selected[(index, names)] = info.select(names)
        return selected

    def slices(self) -> list[SliceInfo]:
        """Every slice held in (dp, cp) order (all of them for a footer read whole); validates each."""
        indices = range(self.num_slices) if self._rows is None else sorted(self._rows)
        return [self.slice(i // self.cp, i % self.cp) for i in indices]

    def check(self, *, layout: Layout | Mapping[str, Any] | None = None, schema: Mapping[str, Any] | None = None) -> None:
        """Raise :class:`SchemaMismatch` if the footer disagrees with the given layout/schema (a namespace's contract).

        ``layout`` is a ``Layout`` or its JSON; objects written without a
        recorded layout are checked on their (dp, cp) grid only. The readers
        check every footer so at parse (``parse_footer(contract=)``, as
        :class:`CorruptObject`); this is the same check for tools, over every slice.
        """
        contract = Contract(layout, schema)
        problem = contract.footer_problem(self)
        for info in () if problem is not None else self.slices():
            problem = contract.slice_problem(info.cp, info.tensors)
            if problem is not None:
                problem = f"slice (dp={info.dp}, cp={info.cp}): {problem}"
                break
        if problem is not None:
            raise SchemaMismatch(f"object {self.key!r}: {problem}")

    def _build(self, index: int) -> SliceInfo:
        # one tolist() of the row: per-field numpy scalar access costs microseconds each
        dp, cp, start, end, first, count = self._slices[index : index + 1].tolist()[0]
        where = f"object {self.key!r}, slice (dp={dp}, cp={cp})"
        infos = []
        for t in self._tensors[first : first + count].tolist():
            name_id, code, ndim, codec_no, dims_at, crc, offset, length = t
            name = self.names[name_id]
            dt = dtype_by_code(code)
            if dt is None:  # checked vectorised at parse; kept for clarity
                raise CorruptObject(f"{where}, tensor {name!r}: unknown dtype code {code}")
            shape = tuple(int(d) for d in self._dims[dims_at : dims_at + ndim].tolist())
            numel = 1
            for d in shape:
                numel *= d
            # versions 1-3 wrote 0 where version 4 numbers the codec: read as they always were
            codec = self._codec(codec_no, where, name) if codec_no and self.codecs else None
            if codec is None and numel * dt.itemsize != length:
                raise CorruptObject(
                    f"{where}, tensor {name!r}: shape {shape} of {dt.name} needs "
                    f"{numel * dt.itemsize} bytes, footer says {length}"
                )
            if codec is not None:
                problem = codec.size_problem(length, numel * dt.itemsize) or codec.problem(
                    np.dtype(dt.numpy_dtype), shape[1:])
                if problem is not None or not shape:
                    raise CorruptObject(f"{where}, tensor {name!r} ({codec.spec}): {problem or 'a 0-dim tensor'}")
            infos.append(TensorInfo(name, dt.name, shape, offset, length, crc, dt, codec))
        if self.contract is not None:
            problem = self.contract.slice_problem(cp, infos)
            if problem is not None:
                raise CorruptObject(f"{where}: {problem}")
        return SliceInfo(dp, cp, start, end, tuple(infos), self.ragged)

    def _codec(self, number: int, where: str, name: str) -> Codec:
        """Codec number ``number`` (from 1) of the footer's table, or :class:`CorruptObject`."""
        if number > len(self.codecs):
            raise CorruptObject(f"{where}, tensor {name!r}: codec #{number}, but the footer names "
                                f"{len(self.codecs)} codec(s)")
        return self.codecs[number - 1]

    def __repr__(self) -> str:
        return (
            f"Footer(key={self.key!r}, size={self.size}, dp={self.dp}, cp={self.cp}, "
            f"tensors={list(self.names)}" + (f", ragged={list(self.ragged)})" if self.ragged else ")")
        )
