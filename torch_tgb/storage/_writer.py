"""Objects written in parts: ``ObjectStore.open_writer(key)``.

A writer takes an object's bytes piece by piece (``write_at``: buffers at an
offset, gaps read as zeros) and publishes them under ``key`` with ``commit``,
with ``put``'s guarantee: no reader ever sees a partial object, and nothing
at all before the commit. ``abort`` drops what was written.

Why: a producer's segment object (tens of MiB) used to be gathered in memory
and then copied once more by ``put``. A store that writes in place
(:class:`~torch_tgb.storage.LocalStore`: a temporary file beside the target,
renamed on commit) takes each TGB's bytes straight into the page cache as it
is encoded, so the kernel writes the segment back while the next batches are
packed, and a commit is an ``fsync`` and a rename. Every other store gets
:class:`BufferedWriter`: the bytes in an anonymous memory map, one ``put`` on
commit (so wrappers that retry, inject faults or count requests see the same
``put`` as before).

A writer killed before its commit (SIGKILL, a lost node) leaves what it
wrote behind where the store keeps unfinished writes: a local temp file, an
S3 multipart upload. No listing shows them as objects; ``list_partial``
does, as :class:`PartialObject` values naming the key each would have been
published under, and ``delete_partial`` removes them (the Reclaimer decides
which are dead, from that key).
"""

from __future__ import annotations

import abc
import mmap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Union

__all__ = ["Buffer", "BufferedWriter", "MappedBuffer", "ObjectWriter", "PartialObject"]

#: what ``put``, ``put_if_absent`` and ``write_at`` accept: any contiguous bytes-like object
Buffer = Union[bytes, bytearray, memoryview]


@dataclass(frozen=True)
class PartialObject:
    """An object whose write started and never finished: storage held that no listing shows.

    ``key``: the key it would have been published under (``None``: not
    known, e.g. a temp file named by an older version); ``name``: the
    backend's handle, what ``delete_partial`` removes (a local temp file's
    path relative to the namespace root, an S3 multipart upload's id);
    ``size``: bytes held (``None``: not known); ``mtime``: its last write
    (local) or its start (S3), seconds since the epoch.
    """

    key: str | None
    name: str
    size: int | None
    mtime: float


class _Puts(Protocol):
    """What a :class:`BufferedWriter` needs of its store: ``put`` (an ``ObjectStore`` has it)."""

    def put(self, key: str, data: Buffer) -> None: ...


class ObjectWriter(abc.ABC):
    """One object being written; visible under :attr:`key` only once :meth:`commit` returns."""

    key: str

    @abc.abstractmethod
    def write_at(self, offset: int, buffers: Sequence[Buffer]) -> int:
        """Write ``buffers`` one after another from byte ``offset``; returns the offset after them.

        The bytes are copied before this returns (the caller may reuse its
        buffers). Bytes never written, before the end of the object, read as zeros.
        """

    @abc.abstractmethod
    def commit(self) -> None:
        """Publish the bytes written (``put``'s semantics: an object already under the key is replaced)."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Drop everything written; nothing is published. Safe to call more than once, and after a failed commit."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The object's size so far: the end of the furthest write."""


class BufferedWriter(ObjectWriter):
    """The default writer: the object gathered in memory, published with one ``store.put`` on commit."""

    def __init__(self, store: _Puts, key: str, *, size_hint: int = 0) -> None:
        self.store = store
        self.key = key
        self._data = MappedBuffer(size_hint)

    def write_at(self, offset: int, buffers: Sequence[Buffer]) -> int:
        return self._data.extend(buffers, at=offset)

    def commit(self) -> None:
        try:
            self.store.put(self.key, self._data.view())
        finally:
            self._data.close()

    def abort(self) -> None:
        self._data.close()

    @property
    def size(self) -> int:
        return len(self._data)


class MappedBuffer:
    """Bytes gathered in an anonymous memory map.

    A bytearray grown by ``+=`` copies itself whenever it outgrows its
    allocation, so a 64 MiB object held up to twice that at the copy. An
    anonymous map is reserved once at the expected size (``size_hint``) and
    costs memory only for the pages written; a write past it moves the bytes
    to a map twice as large.
    """

    def __init__(self, size_hint: int = 0) -> None:
        self._map: mmap.mmap | None = None
        self._len = 0
        self._hint = size_hint

    def __len__(self) -> int:
        return self._len

    def extend(self, buffers: Sequence[Buffer], *, at: int) -> int:
        """Write ``buffers`` from offset ``at`` (zeros before it stay zero); returns the offset after them."""
        views = [memoryview(b).cast("B") for b in buffers]
        end = at + sum(len(v) for v in views)
        size = 0 if self._map is None else len(self._map)
        if end > size:
            grown = mmap.mmap(-1, max(end, 2 * size, self._hint + (1 << 20)))  # zero-filled, lazily backed
            if self._map is not None:
                grown[: self._len] = self._map[: self._len]
                self._map.close()
            self._map = grown
        assert self._map is not None  # reserved just above
        pos = at
        for view in views:
            self._map[pos : pos + len(view)] = view
            pos += len(view)
        self._len = max(self._len, end)
        return end

    def view(self) -> memoryview:
        return memoryview(self._map)[: self._len] if self._map is not None else memoryview(b"")

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view still held (by a failed put's traceback): the collector unmaps it
                pass
            self._map = None
