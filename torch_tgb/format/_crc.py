"""CRC32C of any buffer without copying it: the checksum of every tensor, footer and segment index."""

from __future__ import annotations

from typing import Union

import google_crc32c
import numpy as np

__all__ = ["crc32c_of"]

#: what a CRC is taken of: bytes, a writable buffer, a view of a mapping, or an array's memory
Checksummed = Union[bytes, bytearray, memoryview, np.ndarray]


def crc32c_of(buffer: Checksummed) -> int:
    """CRC32C of a bytes-like object without copying it.

    ``google_crc32c`` only accepts buffers without a release hook (bytes, a
    read-only numpy array); a read-only uint8 view of anything else is free.
    """
    if isinstance(buffer, bytes):
        return int(google_crc32c.value(buffer))
    view = np.frombuffer(buffer, dtype=np.uint8)
    view.flags.writeable = False
    return int(google_crc32c.value(view))
