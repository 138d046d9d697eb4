"""Hostile TGBs written by hand with the format writer's own pieces (``encode_footer``, ``TensorInfo``, CRC32C).

Each is a CRC-valid object that a buggy, older or tampered writer could
produce: tensors other than the namespace's schema, ragged keys stored as
dense ones, a footer whose header and trailer disagree on the format version.
Nothing here touches a reader: the bytes are what a reader would find.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torch_tgb.format import TENSOR_ALIGN, TRAILER_SIZE, TensorInfo
from torch_tgb.format._crc import crc32c_of
from torch_tgb.format._dtypes import dtype_of_tensor
from torch_tgb.format._footer import encode_footer
from torch_tgb.format._records import record_width

__all__ = ["tgb_bytes", "with_versions"]


def tgb_bytes(
    tensors: Mapping[str, torch.Tensor],
    *,
    base: int = 0,
    ragged: Sequence[str] = (),
    schema: Mapping[str, Any] | None = None,
    layout: Mapping[str, Any] | None = None,
    header_version: int | None = None,
    trailer_version: int | None = None,
    records: bool = False,
    key: str = "",
) -> tuple[bytes, int, int, int]:
    """One TGB of one slice (dp=1, cp=1) holding ``tensors`` exactly as given, at ``base`` of its object.

    Returns ``(bytes [base, size), footer_offset, footer_length, slice record width)``
    (width 0: a version-1/2 footer; ``records``: version 3, its tables as slice records). ``schema``:
    what the footer's meta records (default: each tensor's dtype, as the
    producer writes it); ``ragged``: the footer's ragged list (empty: a
    version-1 footer); ``*_version``: force the header's / trailer's format
    version (the footer CRC is recomputed: only the disagreement is hostile).
    """
    pos, parts, infos = base, [], []
    for name, t in tensors.items():
        pad = -pos % TENSOR_ALIGN
        parts.append(bytes(pad))
        pos += pad
        data = t.contiguous().numpy().tobytes()
        dt = dtype_of_tensor(t.dtype)
        assert dt is not None
        infos.append(TensorInfo(name, dt.name, tuple(t.shape), pos, len(data), crc32c_of(data), dt))
        parts.append(data)
        pos += len(data)
    end = pos
    pad = -pos % TENSOR_ALIGN
    parts.append(bytes(pad))
    pos += pad
    if schema is None:
        schema = {n: {"dtype": dtype_of_tensor(t.dtype).name} for n, t in tensors.items()  # type: ignore[union-attr]
                  if not n.endswith("_offsets")}
    footer = encode_footer(dp=1, cp=1, slices=[(0, 0, base, end, infos)], layout=layout, schema=dict(schema),
                           metadata={}, ragged=tuple(ragged), footer_offset=pos if records else None,
                           key=key)
    footer = with_versions(footer, header_version, trailer_version)
    width = record_width(len(infos), sum(len(t.shape) for t in infos)) if records else 0
    return b"".join(parts) + footer, pos, len(footer) - TRAILER_SIZE, width


def with_versions(footer: bytes, header: int | None, trailer: int | None) -> bytes:
    """``footer`` (body + trailer) with its header's / trailer's format version replaced, the footer CRC redone."""
    data = bytearray(footer)
    body = len(data) - TRAILER_SIZE
    if header is not None:
        struct.pack_into("<H", data, 4, header)
    if trailer is not None:
        struct.pack_into("<I", data, body + 12, trailer)
    struct.pack_into("<I", data, body + 8, crc32c_of(bytes(data[:body])))
    return bytes(data)
