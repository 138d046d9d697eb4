"""A local object written in place: :meth:`LocalStore.open_writer`.

Each ``write_at`` goes straight into a temporary file beside the target
(``pwritev``: one copy, into the page cache), so the kernel can write the
object back while the caller prepares the next part. ``commit`` is ``put``'s
commit point: ``fsync`` the file, rename it over the key, ``fsync`` the
directory. Until then the object does not exist under its key, and a crash
leaves only a ``.tgb-tmp.*`` file, which no listing shows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch_tgb.storage._errors import translate
from torch_tgb.storage._writer import ObjectWriter
from torch_tgb.storage.local import _unlink_quietly

if TYPE_CHECKING:
    from torch_tgb.storage._base import Buffer
    from torch_tgb.storage.local import LocalStore

__all__ = ["FileWriter"]

#: buffers handed to one ``pwritev`` (below every platform's IOV_MAX)
_IOV_BATCH = 512


class FileWriter(ObjectWriter):
    """Writes ``key`` of ``store`` into a temp file; ``commit`` publishes it like ``put``."""

    def __init__(self, store: LocalStore, key: str) -> None:
        self.store = store
        self.key = key
        self._path = store._path(key)  # validated and contained, as put checks it
        self._tmp, self._fd = store._create_temp(self._path, key, "put")
        self._size = 0

    def write_at(self, offset: int, buffers: Sequence[Buffer]) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.store.url}: {self.key!r} was committed or aborted; nothing more can be written")
        views = [memoryview(b).cast("B") for b in buffers]
        views = [v for v in views if len(v)]
        try:
            for first in range(0, len(views), _IOV_BATCH):
                offset = _pwrite_all(self._fd, views[first : first + _IOV_BATCH], offset)
        except OSError as e:
            self.abort()  # a full disk: nothing of this object is kept
            raise translate(e, url=self.store.url, op="put", key=self.key) from e
        self._size = max(self._size, offset)
        return offset

    def commit(self) -> None:
        if self._fd < 0:
            raise ValueError(f"{self.store.url}: {self.key!r} was committed or aborted already")
        fd, self._fd = self._fd, -1
        try:
            if os.fstat(fd).st_size < self._size:  # a gap at the end reads as zeros: give the file its size
                os.ftruncate(fd, self._size)
            if self.store.fsync:
                os.fsync(fd)
        except OSError as e:
            os.close(fd)
            _unlink_quietly(self._tmp)
            raise translate(e, url=self.store.url, op="put", key=self.key) from e
        os.close(fd)
        self.store._publish(self._tmp, self._path, self.key, "put")

    def abort(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
            _unlink_quietly(self._tmp)

    @property
    def size(self) -> int:
        return self._size

    def __del__(self) -> None:  # dropped without commit or abort (an exception on the way): no temp file left
        if getattr(self, "_fd", -1) >= 0:
            self.abort()


def _pwrite_all(fd: int, views: list[memoryview], offset: int) -> int:
    """Write every byte of ``views`` from ``offset`` (a write may stop short); returns the offset after them."""
    while views:
        n = os.pwritev(fd, views, offset)
        if n <= 0:
            raise OSError(f"pwritev wrote {n} bytes")
        offset += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views = views[1:]
        if n:
            views[0] = views[0][n:]
    return offset
