"""SliceRun: one slice of each TGB of a run in one mapped object, read as views (``SliceReader.runs`` builds it).

The run path's hot loop (``datapipes.read.LocalRuns``): one view and a CRC per
tensor and TGB, the cast applied as it reads where it widens; a slice stored
compressed (format version 4) is decoded whole by ``decode_slice`` instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import google_crc32c
import numpy as np
import torch

from torch_tgb.format._decode import ByteSource, check_ragged_slice, crc_mismatch, decode_slice
from torch_tgb.format._dtypes import CHECK, WIDEN, IntegerCast, dtype_of_tensor
from torch_tgb.format._footer_view import SliceInfo, TensorInfo

if TYPE_CHECKING:
    from torch_tgb.format._reader import SliceReader

__all__ = ["SliceRun"]


class SliceRun:
    """One slice of each TGB of a run in one mapped object: ``read(i)`` gives TGB ``i``'s tensors.

    Built by :meth:`SliceReader.run`. The decode plan is the first TGB's;
    TGB ``i``'s tensors lie ``shifts[i]`` bytes further and carry
    ``crcs[i]``, so a read is one view per tensor and a CRC under the reader's
    verify policy.
    """

    __slots__ = ("_always", "_coded", "_first", "_never", "_plan", "_ragged", "_reader", "buffer", "crcs", "info",
                 "key", "shifts")

    def __init__(
        self, reader: SliceReader, key: str, buffer: ByteSource, info: SliceInfo, shifts: list[int],
        crcs: list[tuple[int, ...]],
    ) -> None:
        self._reader = reader
        self.key = key
        self.buffer = buffer
        self.info = info
        self.shifts = shifts
        self.crcs = crcs
        self._always = reader.verify == "always"
        self._first = reader.verify == "first"
        self._never = not (self._always or self._first)
        self._ragged = bool(info.ragged)
        self._coded = info.coded
        # (name, stored dtype, count, offset, shape, torch view, torch cast, numpy cast): cast_with sets the casts
        self._plan: tuple[tuple[str, np.dtype, int, int, tuple[int, ...], torch.dtype | None, torch.dtype | None,
                                np.dtype | None], ...] = tuple(
            (name, np_dtype, count, offset, shape, view, None, None)
            for name, np_dtype, count, offset, shape, view, _crc in info.decode_plan)

    def cast_with(self, cast: IntegerCast) -> bool:
        """Cast each tensor as it is read, by ``cast``'s rules (the run path's single slice: no second pass).

        False, and nothing changes, where a tensor's cast narrows (it must look
        at the values: the caller casts the step as a whole).
        """
        if self._coded:  # decoded as a whole slice (read): the caller casts the step
            return False
        targets = []
        for row, tensor in zip(self._plan, self.info.tensors):
            rule = cast.rule(row[0], tensor._dt.torch_dtype)
            if rule == CHECK:
                return False
            targets.append(cast.dtype if rule == WIDEN else None)
        self._plan = tuple((*row[:6], target, _numpy_twin(target) if row[5] is None else None)
                           for row, target in zip(self._plan, targets))
        return True

    def __len__(self) -> int:
        return len(self.shifts)

    def read(self, i: int) -> dict[str, torch.Tensor]:
        """TGB ``i``'s tensors of this slice (views of the mapping, unless :meth:`cast_with` casts them)."""
        d = self.shifts[i]
        start = self.info.start + d
        check = self._always or (self._first and (self.key, start) not in self._reader._verified)
        crcs = self.crcs[i]
        if self._coded:  # stored compressed (format version 4): decoded whole, as every read path decodes it
            out = decode_slice(self.buffer, self._shifted(d, crcs), verify=check, key=self.key)
            if check and self._first:
                self._reader._mark_range(self.key, start)
            return out
        buffer = self.buffer
        out = {}
        j = 0
        for name, np_dtype, count, offset, shape, view, cast, np_cast in self._plan:
            arr = np.frombuffer(buffer, dtype=np_dtype, count=count, offset=offset + d)
            if check and google_crc32c.value(arr) != crcs[j]:
                raise crc_mismatch(self.key, self.info, name, crcs[j])
            j += 1
            if np_cast is not None:  # numpy's cast copy is cheaper per call than torch's .to
                out[name] = torch.from_numpy(arr.astype(np_cast).reshape(shape))
                continue
            tensor = torch.from_numpy(arr.reshape(shape))  # a numpy reshape is cheaper than Tensor.view
            if view is not None:
                tensor = tensor.view(view)
            out[name] = tensor if cast is None else tensor.to(cast)
        if self._ragged and (check or self._never):  # a verified range was checked when it was verified
            check_ragged_slice(out, self.info, self.key)
        if check and self._first:
            self._reader._mark_range(self.key, start)
        return out

    def _shifted(self, d: int, crcs: tuple[int, ...]) -> SliceInfo:
        """The slice of the TGB ``d`` bytes after the first, with its tensors' CRCs."""
        info = self.info
        tensors = tuple(TensorInfo(t.name, t.dtype, t.shape, t.offset + d, t.length, crc, t._dt, t.codec)
                        for t, crc in zip(info.tensors, crcs))
        return SliceInfo(info.dp, info.cp, info.start + d, info.end + d, tensors, info.ragged)


def _numpy_twin(dtype: torch.dtype | None) -> np.dtype | None:
    """The numpy dtype of torch ``dtype`` from the format's dtype table (None: no dtype, or only a stand-in)."""
    known = None if dtype is None else dtype_of_tensor(dtype)
    return None if known is None or known.needs_view else known.numpy_dtype
