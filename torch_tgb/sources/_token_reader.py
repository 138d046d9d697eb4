"""Reading a token array by spans: ``pread`` into fresh arrays for a file, slices for an in-memory array.

:class:`TokenReader` is what :class:`~torch_tgb.sources.TokenFile` reads
through: a document (``reader[a:b]``), a window's runs of documents into one
array (:meth:`TokenReader.read_runs`), and the kernel told what comes next
(:meth:`TokenReader.advise`).
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from torch_tgb.errors import SourceError

__all__ = ["TokenReader"]


class TokenReader:
    """``tokens[start:stop]`` as a fresh array; a file-backed memmap is read with ``pread``.

    Slicing a memory map leaves every page it touched (and the pages the kernel
    maps around each fault) in this process's resident set, so a pass over a
    file-backed corpus would grow the RSS to the file's size.
    """

    def __init__(self, array: np.ndarray, where: str) -> None:
        self.array = array
        self.dtype = array.dtype
        self.where = where
        self._fd: int | None = None
        self._base = 0
        filename = getattr(array, "filename", None)
        mapping = getattr(array, "_mmap", None)
        if isinstance(array, np.memmap) and filename and mapping is not None and array.flags.c_contiguous:
            # where the array starts in the file: the mapping starts at the offset rounded down to the
            # allocation granularity; a slice of a memmap keeps its parent's ``offset``
            mapped_at = int(array.offset) - int(array.offset) % mmap.ALLOCATIONGRANULARITY
            map_address = np.frombuffer(mapping, dtype=np.uint8, count=1).ctypes.data
            self._base = mapped_at + array.ctypes.data - map_address
            self._fd = os.open(filename, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, span: slice) -> np.ndarray:
        if self._fd is None:
            return np.asarray(self.array[span])
        start, stop = int(span.start), int(span.stop)
        out = np.empty(stop - start, dtype=self.dtype)
        self._read_into(out.view(np.uint8).data, start, stop)
        return out

    def read_runs(self, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        """Tokens ``[starts[i], stops[i])`` of every ``i``, concatenated into one fresh array (each read into place)."""
        if self._fd is None:
            parts = [self.array[a:b] for a, b in zip(starts.tolist(), stops.tolist())]
            return np.array(parts[0]) if len(parts) == 1 else np.concatenate(parts)
        lengths = stops - starts
        out = np.empty(int(lengths.sum()), dtype=self.dtype)
        view = out.view(np.uint8).data
        fd, base, size = self._fd, self._base, self.dtype.itemsize
        at = 0
        for a, n in zip(starts.tolist(), (lengths * size).tolist()):  # one pread per run, straight into place
            got = os.preadv(fd, [view[at : at + n]], base + a * size)
            if got != n:  # a short read (past 2 GiB, or the end of the file): the careful loop finishes it
                self._read_into(view[at + got : at + n], a + got // size, a + n // size, skip=got % size)
            at += n
        return out

    def advise(self, starts: np.ndarray, stops: np.ndarray) -> None:
        """Tell the kernel that tokens ``[starts[i], stops[i])`` will be read soon (a file; else nothing)."""
        advise = getattr(os, "posix_fadvise", None)  # not on every platform (macOS)
        if self._fd is None or advise is None:
            return
        size = self.dtype.itemsize
        for a, b in zip(starts.tolist(), stops.tolist()):
            if b > a:
                advise(self._fd, self._base + a * size, (b - a) * size, os.POSIX_FADV_WILLNEED)

    def _read_into(self, view: memoryview, start: int, stop: int, *, skip: int = 0) -> None:
        """Bytes of tokens ``[start, stop)`` into ``view``, from byte ``skip`` of token ``start`` on."""
        assert self._fd is not None  # a file-backed reader
        size = self.dtype.itemsize
        want, got = (stop - start) * size - skip, 0
        while got < want:  # straight into the array; a read stops short past 2 GiB (Linux) or at EOF
            n = os.preadv(self._fd, [view[got:]], self._base + start * size + skip + got)
            if n == 0:
                raise SourceError(f"{self.where}: short read of tokens [{start}, {stop}): {got} of {want} bytes")
            got += n

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()
