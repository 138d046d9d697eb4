"""Byte-layout constants of the TGB object (see ``docs/format.md``); shared by writer, parser and checks."""

from __future__ import annotations

import struct

import numpy as np

from torch_tgb.format._dtypes import dtype_by_code

__all__ = [
    "FOOTER_MAGIC",
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "MAX_DIM",
    "MAX_JSON_DEPTH",
    "MAX_META_BYTES",
    "MAX_NDIM",
    "SLICE_ALIGN",
    "TENSOR_ALIGN",
    "TRAILER_MAGIC",
    "TRAILER_SIZE",
]

#: the newest format version this code reads and writes. Version 2 adds ragged keys (meta ``"ragged"``);
#: an object without them is still written as version 1, so older readers keep reading such namespaces,
#: and refuse (with the version in the message) only objects whose keys they would misread.
FORMAT_VERSION = 2
FORMAT_VERSIONS = (1, 2)
#: PNG-style magic: a high byte and CR/LF/^Z catch text-mode mangling
TRAILER_MAGIC = b"\x89TGB\r\n\x1a\n"
FOOTER_MAGIC = b"TGBF"
SLICE_ALIGN = 4096
TENSOR_ALIGN = 64
MAX_NDIM = 16
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
