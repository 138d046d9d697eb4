"""Tensors from a slice's bytes with no payload copy: the CRC and ragged-offset checks of every read path.

:func:`decode_slice` views a buffer that holds the object (a mapping, a
private buffer, or fetched bytes) as the slice's tensors, checking each
tensor's CRC32C when asked and every ragged key's offsets always (they are
untrusted bytes: a CRC only says they were written so). A slice with tensors
stored compressed (format version 4) is first decoded by :func:`inflate_slice`
into one fresh buffer laid out as a plain slice (``SliceInfo.decoded``), which
the tensors then view: the one buffer a plain remote read fills, so every read
path (mapped, fetched, ``tgb verify``) decodes through here, on the thread that
reads (a reader's read-ahead thread).
"""

from __future__ import annotations

import mmap
import warnings
from typing import Union

import google_crc32c
import numpy as np
import torch

from torch_tgb.errors import CorruptObject
from torch_tgb.format._footer_view import SliceInfo
from torch_tgb.layout import check_offsets, offsets_key

__all__ = ["ByteSource", "check_ragged_slice", "crc_mismatch", "decode_slice", "inflate_slice", "writable"]

# decode_slice over caller-supplied immutable bytes (read_footer's callers, tools) stays
# legal; the readers hand out writable buffers only. Torch warns once per process about
# read-only arrays; the filter is scoped to the call sites here and in _reader.py.
warnings.filterwarnings(
    "ignore", message="The given NumPy array is not writable", category=UserWarning,
    module=r"torch_tgb\.format\._(decode|reader|slice_run)$",
)

#: what slices are decoded from: a mapping, a private buffer, or fetched bytes
ByteSource = Union[bytes, bytearray, memoryview, mmap.mmap]


def decode_slice(
    buffer: ByteSource,
    slice_info: SliceInfo,
    *,
    base_offset: int = 0,
    verify: bool = True,
    key: str = "?",
) -> dict[str, torch.Tensor]:
    """Tensors of ``slice_info`` viewing ``buffer`` (which holds the object from ``base_offset``).

    No payload copy: each tensor's storage is ``buffer`` itself. Raises
    :class:`CorruptObject` naming object, slice and tensor on a short buffer
    or a CRC mismatch.
    """
    if base_offset > slice_info.start or len(buffer) < slice_info.end - base_offset:
        raise CorruptObject(
            f"object {key!r}, slice (dp={slice_info.dp}, cp={slice_info.cp}): truncated, buffer holds "
            f"[{base_offset}, {base_offset + len(buffer)}) but the slice is [{slice_info.start}, {slice_info.end})"
        )
    if slice_info.coded:
        buffer = inflate_slice(buffer, slice_info, base_offset=base_offset, verify=verify, key=key)
        slice_info, base_offset, verify = slice_info.decoded, 0, False  # CRCs were the stored bytes'
    out: dict[str, torch.Tensor] = {}
    for name, np_dtype, count, offset, shape, view, crc in slice_info.decode_plan:
        arr = np.frombuffer(buffer, dtype=np_dtype, count=count, offset=offset - base_offset)
        # google_crc32c reads the array's bytes in place (no copy)
        if verify and google_crc32c.value(arr) != crc:
            raise crc_mismatch(key, slice_info, name, crc)
        tensor = torch.from_numpy(arr.reshape(shape))
        out[name] = tensor if view is None else tensor.view(view)
    if slice_info.ragged:
        check_ragged_slice(out, slice_info, key)
    return out


def inflate_slice(
    buffer: ByteSource, slice_info: SliceInfo, *, base_offset: int, verify: bool, key: str
) -> bytearray:
    """The bytes of ``slice_info.decoded``: each tensor's stored bytes (in ``buffer``, which holds the object from
    ``base_offset``) CRC-checked when asked, then copied or decoded into its place.

    Decoding is bounded by each tensor's shape (``Codec.decode_into``): a lie in a stored size, a decoded size
    or a frame is a :class:`CorruptObject` naming object, slice and tensor, with no more than the slice's
    decoded bytes allocated.
    """
    plain = slice_info.decoded
    out = bytearray(plain.end)
    src, dst = memoryview(buffer), memoryview(out)
    for stored, target in zip(slice_info.tensors, plain.tensors):
        at = stored.offset - base_offset
        data = src[at : at + stored.length]
        if verify and google_crc32c.value(np.frombuffer(data, dtype=np.uint8)) != stored.crc32c:
            raise crc_mismatch(key, slice_info, stored.name, stored.crc32c)
        into = dst[target.offset : target.offset + target.length]
        if stored.codec is None:
            into[:] = data
            continue
        where = f"object {key!r}, slice (dp={slice_info.dp}, cp={slice_info.cp}), tensor {stored.name!r}"
        stored.codec.decode_into(data, into, dtype=np.dtype(stored._dt.numpy_dtype), shape=stored.shape, where=where)
    return out


def check_ragged_slice(tensors: dict[str, torch.Tensor], slice_info: SliceInfo, key: str) -> None:
    """Raise :class:`CorruptObject` unless every ragged key's offsets fit its values and the slice's rows.

    Offsets are untrusted bytes (a CRC only says they were written so): they
    must be int64 ``[rows + 1]`` from 0, non-decreasing, ending at the values'
    item count, with the rows of the dense tensors and of the other ragged keys.
    ``tensors`` are the slice's as decoded; their shapes and dtypes were judged
    once per slice (:attr:`SliceInfo.ragged_checks`), so a read checks values only.
    """
    for check in slice_info.ragged_checks:
        problem = check.problem
        if problem is None:
            problem = check_offsets(check.values_rows, tensors[check.offsets].numpy(), check.rows)
        if problem is not None:
            raise CorruptObject(
                f"object {key!r}, slice (dp={slice_info.dp}, cp={slice_info.cp}), ragged key {check.name!r}: {problem}"
            )


def crc_mismatch(key: str, slice_info: SliceInfo, name: str, crc: int) -> CorruptObject:
    """The error of a tensor whose bytes do not match its stored CRC32C (decode_slice and SliceRun word it alike)."""
    return CorruptObject(
        f"object {key!r}, slice (dp={slice_info.dp}, cp={slice_info.cp}), tensor {name!r}: "
        f"CRC32C mismatch (stored {crc:#010x})"
    )


def writable(data: ByteSource) -> bytearray | memoryview | mmap.mmap:
    """``data`` itself if it is a writable buffer, else a writable copy (bytearray)."""
    if isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly):
        return bytearray(data)
    return data
