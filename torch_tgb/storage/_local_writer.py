"""A local object written in place: :meth:`LocalStore.open_writer`.

Each ``write_at`` goes straight into a temporary file beside the target
(``pwritev``: one copy, into the page cache). ``commit`` is ``put``'s
commit point: ``fsync`` the file, rename it over the key, ``fsync`` the
directory. Until then the object does not exist under its key, and a crash
leaves only a ``.tgb-tmp.*`` file, which no listing shows.

The kernel would leave a segment's pages dirty until that ``fsync`` (its
writeback starts seconds later, or at a share of memory), so the whole
object would go to the disk at the commit, with the caller waiting. Instead,
every :data:`WRITEBACK_BYTES` written, a thread of the writer's own syncs
what is there (``fdatasync``) while the caller goes on encoding: the commit's
``fsync`` waits only for the last stretch. The commit still syncs the whole
file, so durability does not depend on those syncs (an error in one fails
the commit).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from torch_tgb.storage._errors import translate
from torch_tgb.storage._writer import Buffer, ObjectWriter

__all__ = ["FileWriter", "unlink_quietly"]

#: buffers handed to one ``pwritev`` (below every platform's IOV_MAX)
_IOV_BATCH = 512

#: bytes written between two background syncs of an object being written (the commit syncs the rest)
WRITEBACK_BYTES = 8 << 20


class FileWriter(ObjectWriter):
    """Writes ``key`` into the temp file ``tmp`` (open as ``fd``); ``commit`` syncs it and calls ``publish``.

    ``url``: the namespace (for errors); ``fsync``: whether to sync the file
    before publishing; ``publish()``: gives the temp file its final name
    (``LocalStore._publish``: rename, then sync the directory).
    """

    def __init__(self, url: str, key: str, tmp: str, fd: int, *, fsync: bool, publish: Callable[[], None]) -> None:
        self.url = url
        self.key = key
        self._tmp, self._fd = tmp, fd
        self._fsync = fsync
        self._publish = publish
        self._size = 0
        self._synced = 0  # bytes up to which a background sync was started
        self._syncing: threading.Thread | None = None
        self._sync_error: OSError | None = None

    def write_at(self, offset: int, buffers: Sequence[Buffer]) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.url}: {self.key!r} was committed or aborted; nothing more can be written")
        views = [memoryview(b).cast("B") for b in buffers]
        views = [v for v in views if len(v)]
        try:
            for first in range(0, len(views), _IOV_BATCH):
                offset = _pwrite_all(self._fd, views[first : first + _IOV_BATCH], offset)
        except OSError as e:
            self.abort()  # a full disk: nothing of this object is kept
            raise translate(e, url=self.url, op="put", key=self.key) from e
        self._size = max(self._size, offset)
        if self._fsync and self._size - self._synced >= WRITEBACK_BYTES and not self._sync_running():
            self._synced = self._size
            self._syncing = threading.Thread(target=self._sync_in_background, args=(self._fd,),
                                             name="tgb-writeback", daemon=True)
            self._syncing.start()
        return offset

    def _sync_running(self) -> bool:
        return self._syncing is not None and self._syncing.is_alive()

    def _sync_in_background(self, fd: int) -> None:
        try:
            os.fdatasync(fd)
        except OSError as e:  # kept for the commit, which syncs again and fails with it
            self._sync_error = e

    def _join_sync(self) -> None:
        """Wait for the background sync (before the fd is synced for good or closed)."""
        if self._syncing is not None:
            self._syncing.join()
            self._syncing = None

    def commit(self) -> None:
        if self._fd < 0:
            raise ValueError(f"{self.url}: {self.key!r} was committed or aborted already")
        fd, self._fd = self._fd, -1
        self._join_sync()
        try:
            if self._sync_error is not None:
                raise self._sync_error
            if os.fstat(fd).st_size < self._size:  # a gap at the end reads as zeros: give the file its size
                os.ftruncate(fd, self._size)
            if self._fsync:
                os.fsync(fd)
        except OSError as e:
            os.close(fd)
            unlink_quietly(self._tmp)
            raise translate(e, url=self.url, op="put", key=self.key) from e
        os.close(fd)
        self._publish()

    def abort(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            self._join_sync()
            os.close(fd)
            unlink_quietly(self._tmp)

    @property
    def size(self) -> int:
        return self._size

    def __del__(self) -> None:  # dropped without commit or abort (an exception on the way): no temp file left
        if getattr(self, "_fd", -1) >= 0:
            self.abort()


def _pwrite_all(fd: int, views: list[memoryview], offset: int) -> int:
    """Write every byte of ``views`` from ``offset`` (a write may stop short); returns the offset after them."""
    at = 0  # the first view not written completely
    while at < len(views):
        n = os.pwritev(fd, views[at:], offset)
        if n <= 0:
            raise OSError(f"pwritev wrote {n} bytes")
        offset += n
        while at < len(views) and n >= len(views[at]):
            n -= len(views[at])
            at += 1
        if n:
            views[at] = views[at][n:]
    return offset


def unlink_quietly(path: str) -> None:
    """Remove ``path``; nothing if it is gone already or cannot be removed (a temp file's best effort)."""
    try:
        os.unlink(path)
    except OSError:
        pass
