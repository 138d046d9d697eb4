"""Byte-layout constants of the TGB object (see ``docs/format.md``); shared by writer, parser and checks."""

from __future__ import annotations

import struct

import numpy as np

from torch_tgb.format._dtypes import dtype_by_code

__all__ = [
    "CODEC_VERSION",
    "FOOTER_MAGIC",
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "MAX_DIM",
    "MAX_JSON_DEPTH",
    "MAX_META_BYTES",
    "MAX_NDIM",
    "PAGE_ALIGN_FROM",
    "SLICE_ALIGN",
    "TENSOR_ALIGN",
    "V3_SLICE_ALIGN",
    "record_dtype",
    "TRAILER_MAGIC",
    "TRAILER_SIZE",
]

#: the format version this code writes (objects without compressed tensors). Version 2 adds ragged keys
#: (meta ``"ragged"``); version 3 lays the footer's tables out as one fixed-width record per slice, right after
#: the header, each with its own CRC32C (a rank reads its own record, not the whole footer: ``_records.py``),
#: and aligns slices to 64 bytes unless they are large (``SLICE_ALIGN`` then). Version 4
#: (:data:`CODEC_VERSION`) is version 3 with tensors stored compressed (``_codecs.py``): the meta names the
#: codecs, a tensor row's ``pad`` field numbers its codec; a writer marks an object 4 only when its
#: producer chose codecs. Older readers refuse a version they do not know, with the version in the message.
FORMAT_VERSION = 3
CODEC_VERSION = 4
FORMAT_VERSIONS = (1, 2, 3, 4)
#: PNG-style magic: a high byte and CR/LF/^Z catch text-mode mangling
TRAILER_MAGIC = b"\x89TGB\r\n\x1a\n"
FOOTER_MAGIC = b"TGBF"
SLICE_ALIGN = 4096
TENSOR_ALIGN = 64
#: version 3: a slice starts on a multiple of this (``TENSOR_ALIGN``); on a page (``SLICE_ALIGN``) when its
#: TGB's largest slice holds at least ``PAGE_ALIGN_FROM`` bytes (padding is then a small share of it)
V3_SLICE_ALIGN = TENSOR_ALIGN
PAGE_ALIGN_FROM = 64 << 10
MAX_NDIM = 16
#: no real footer is larger (a few dozen bytes per tensor, a slice table): a bigger claim is corrupt, refused
#: before anyone reads it (manifest entries, the footer index)
MAX_FOOTER_BYTES = 64 << 20
#: a footer's JSON part never needs more; anything bigger is corrupt
MAX_META_BYTES = 16 << 20
MAX_JSON_DEPTH = 32
#: no real dimension is larger; shapes are multiplied exactly in Python ints
MAX_DIM = 1 << 40

_TRAILER = struct.Struct("<QII8s")
TRAILER_SIZE = _TRAILER.size  # 24
_HEADER = struct.Struct("<4sHHIIIIII")  # 32 bytes
_SLICE_ROW = np.dtype(
    [("dp", "<u4"), ("cp", "<u4"), ("start", "<u8"), ("end", "<u8"), ("first", "<u4"), ("count", "<u4")]
)
_TENSOR_ROW = np.dtype(
    [
        ("name", "<u4"),
        ("dtype", "u1"),
        ("ndim", "u1"),
        ("pad", "<u2"),
        ("dims", "<u4"),
        ("crc", "<u4"),
        ("offset", "<u8"),
        ("length", "<u8"),
    ]
)
_DIM = np.dtype("<i8")
#: lookup table: is this u8 a known dtype code (read-only constant)
_KNOWN_CODES = np.array([dtype_by_code(c) is not None for c in range(256)], dtype=bool)
_KNOWN_CODES.flags.writeable = False
_KNOWN_CODE_SET = frozenset(c for c in range(256) if dtype_by_code(c) is not None)

#: the end of a version-3 slice record: its CRC32C and the CRC32C of the footer's meta JSON
_RECORD_TAIL = np.dtype([("crc", "<u4"), ("meta_crc", "<u4")])


def record_dtype(tensors: int, dims: int) -> np.dtype:
    """A version-3 slice record: the slice row, its ``tensors`` tensor rows, its ``dims`` dims, CRC and meta CRC."""
    return np.dtype([("slice", _SLICE_ROW), ("tensors", _TENSOR_ROW, (tensors,)), ("dims", _DIM, (dims,)),
                     ("tail", _RECORD_TAIL)])
