"""One hot-tier entry on disk: its bytes, the trailer that checks them, and the checked read.

::

    entry   = payload | "TGBK" | crc32c(binding | payload) u32 | len(payload) u64   (little-endian)
    binding = "<namespace id>\\n<key>\\n<start>\\n<end>\\n"   (UTF-8; covered by the CRC, not stored)

The checksum covers the namespace, key and byte range the entry was filled
for, not only its payload: a valid entry copied or renamed over another one
of the same length (a restore into the wrong place, a sync tool, a hand
"repair") fails its check like a torn one, and is never served as the bytes
of another range. Entries of the older layout (magic ``TGBH``: a CRC of the
payload alone, not bound to their name) fail the magic check.

An entry is opened without blocking and without following a symlink, and its
type is checked on the open descriptor: a FIFO, socket, device, directory or
symlink at an entry's path is a damaged entry, never waited on (a plain
``open`` of a FIFO waits for a writer forever).
"""

from __future__ import annotations

import errno
import os
import stat
import struct

import google_crc32c
import numpy as np

from torch_tgb.storage._base import Buffer

__all__ = ["TRAILER_SIZE", "DamagedEntry", "binding", "read_entry", "trailer"]

_TRAILER = struct.Struct("<4sIQ")
TRAILER_SIZE = _TRAILER.size
_MAGIC = b"TGBK"  # "TGBH" (v1 entries: a CRC of the payload alone) is not trusted
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class DamagedEntry(ValueError):
    """The file at an entry's path is not a whole, checked entry of that namespace, key and range."""


def binding(namespace_id: str, key: str, start: int, end: int) -> bytes:
    """What an entry's checksum covers besides its payload: where it belongs."""
    return f"{namespace_id}\n{key}\n{start}\n{end}\n".encode()


def trailer(payload: Buffer, bound: bytes) -> bytes:
    """The trailer written after ``payload`` in the entry that ``bound`` (:func:`binding`) names."""
    return _TRAILER.pack(_MAGIC, _crc(payload, bound), memoryview(payload).nbytes)


def read_entry(path: str, bound: bytes, out: memoryview | None, limit: int) -> tuple[bytes | memoryview, int]:
    """The checked payload of the entry at ``path`` (a view of ``out`` when it fits) and its length.

    Raises ``FileNotFoundError`` (no entry), :class:`DamagedEntry` (torn,
    corrupt, misplaced, longer than ``limit`` or not a regular file) or
    another ``OSError`` (the cache disk failed).
    """
    with os.fdopen(_open_regular(path), "rb") as f:
        length = os.fstat(f.fileno()).st_size - TRAILER_SIZE
        if length < 0 or length > limit:
            raise DamagedEntry(f"{path}: size")
        payload: bytes | memoryview
        if out is not None and length <= len(out):
            payload = out[:length]
            got = f.readinto(payload)
        else:
            payload = f.read(length)
            got = len(payload)
        try:
            magic, crc, stored = _TRAILER.unpack(f.read(TRAILER_SIZE))
        except struct.error as e:
            raise DamagedEntry(f"{path}: trailer") from e
    if got != length or magic != _MAGIC or stored != length or _crc(payload, bound) != crc:
        raise DamagedEntry(f"{path}: trailer")
    return payload, length


def _open_regular(path: str) -> int:
    """A descriptor of the regular file at ``path``, opened without blocking or following a link."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DamagedEntry(f"{path}: a symlink") from e
        raise
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise DamagedEntry(f"{path}: not a regular file")
    return fd


def _crc(buffer: Buffer, bound: bytes) -> int:
    """CRC32C of ``bound`` then ``buffer``, without a copy (google_crc32c takes bytes or a read-only array)."""
    head = google_crc32c.value(bound)
    if isinstance(buffer, bytes):
        return int(google_crc32c.extend(head, buffer))
    view = np.frombuffer(buffer, dtype=np.uint8)
    view.flags.writeable = False
    return int(google_crc32c.extend(head, view))
