"""Opening only regular files: a FIFO, socket or device planted where an object should be is refused, never
waited on (``O_NONBLOCK``; the type checked on the open descriptor, so no check-then-open race).

Used by :class:`~torch_tgb.storage.local.LocalStore`'s reads and by the reader's mmap path
(``format/_reader.py``), which opens ``store.local_path(key)`` itself.
"""

from __future__ import annotations

import os
import stat

from torch_tgb.errors import InvalidKey, ObjectNotFound
from torch_tgb.storage._errors import translate

__all__ = ["open_nonblocking", "open_regular", "require_regular"]


def open_nonblocking(path: str) -> int:
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer,
    # forever; on a regular file the flag changes nothing.
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))


def require_regular(fd: int, key: str, where: str) -> None:
    """Close ``fd`` and raise unless it is a regular file (checked on the descriptor: no race)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISREG(mode):
        return
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise ObjectNotFound(f"{where} {key!r}: no such object (a directory)")
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    raise InvalidKey(f"{where} {key!r}: not a regular file ({kind}); refusing to read it")


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def open_regular(path: str, key: str) -> int:
    """Open ``path`` (``store.local_path(key)``) read-only, refusing anything but a regular file.

    Never blocks (a FIFO planted as an object would make a plain ``open``
    wait for a writer forever); the type is checked on the open descriptor.
    Raises ``InvalidKey`` naming ``key`` for a FIFO, socket or device,
    ``ObjectNotFound`` for a directory or a missing file. The caller owns the
    returned descriptor.
    """
    try:
        fd = open_nonblocking(path)
    except OSError as e:
        raise translate(e, url=f"file://{os.path.dirname(path)}", op="open", key=key) from e
    require_regular(fd, key, f"open {path!r} for")
    return fd
