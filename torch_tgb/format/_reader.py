"""Reading TGB objects: the footer, then one slice as tensors with no payload copy.

Local objects (``store.local_path(key)`` is a path) are memory-mapped
copy-on-write (``ACCESS_COPY``): tensors view the page cache, and a trainer
that modifies a batch in place changes its private pages, never the file.
Remote objects are read with one range read per slice; the returned bytes
become the tensors' storage. CRC32C is checked per tensor unless
``verify=False``.
"""

from __future__ import annotations

import mmap
import threading
import warnings
from typing import TYPE_CHECKING, Any

import google_crc32c
import numpy as np
import torch

from torch_tgb.errors import CorruptObject
from torch_tgb.format._footer import TRAILER_SIZE, Footer, SliceInfo, parse_footer, parse_trailer
from torch_tgb.storage.local import open_regular

if TYPE_CHECKING:
    from torch_tgb.storage import ObjectStore

__all__ = ["SliceReader", "decode_slice", "read_footer", "read_slice"]

_MISSING = object()

#: bytes read from the end of an object when the footer location is unknown
TAIL_READ = 64 << 10

# Tensors over the immutable ``bytes`` of a remote read are safe to hand out:
# nobody else holds those bytes. Torch warns once per process about it; the
# filter is scoped to this module's call site so users' own warnings stay.
warnings.filterwarnings(
    "ignore", message="The given NumPy array is not writable", category=UserWarning, module=__name__
)


def read_footer(
    store: ObjectStore,
    key: str,
    *,
    size: int | None = None,
    footer_offset: int | None = None,
    footer_length: int | None = None,
) -> Footer:
    """Read and parse the footer of ``key``.

    With ``size``, ``footer_offset`` and ``footer_length`` known (a manifest
    entry has them) this is exactly one range read. Otherwise the size is
    asked for and the tail of the object is read (twice if the footer is
    larger than the first tail read).
    """
    if size is None:
        size = store.size(key)
    if size < TRAILER_SIZE:
        raise CorruptObject(f"object {key!r}: truncated, {size} bytes is smaller than the trailer")
    if footer_offset is not None and footer_length is not None:
        if footer_offset < 0 or footer_offset + footer_length + TRAILER_SIZE != size:
            raise CorruptObject(
                f"object {key!r}: footer at {footer_offset} of length {footer_length} does not end "
                f"an object of {size} bytes"
            )
        return parse_footer(store.get_range(key, footer_offset, size), key=key, size=size, footer_offset=footer_offset)
    tail_start = max(0, size - TAIL_READ)
    tail = store.get_range(key, tail_start, size)
    if len(tail) != size - tail_start:
        raise CorruptObject(f"object {key!r}: truncated, read {len(tail)} of {size - tail_start} tail bytes")
    offset, _length = parse_trailer(tail, key=key, size=size)
    rest = memoryview(tail)[offset - tail_start :] if offset >= tail_start else store.get_range(key, offset, size)
    return parse_footer(rest, key=key, size=size, footer_offset=offset)


def decode_slice(
    buffer: Any,
    slice_info: SliceInfo,
    *,
    base_offset: int = 0,
    verify: bool = True,
    key: str = "?",
) -> dict[str, torch.Tensor]:
    """Tensors of ``slice_info`` viewing ``buffer`` (which holds the object from ``base_offset``).

    No payload copy: each tensor's storage is ``buffer`` itself. Raises
    :class:`CorruptObject` naming object, slice and tensor on a short buffer
    or a CRC mismatch.
    """
    if base_offset > slice_info.start or len(buffer) < slice_info.end - base_offset:
        raise CorruptObject(
            f"object {key!r}, slice (dp={slice_info.dp}, cp={slice_info.cp}): truncated, buffer holds "
            f"[{base_offset}, {base_offset + len(buffer)}) but the slice is [{slice_info.start}, {slice_info.end})"
        )
    out: dict[str, torch.Tensor] = {}
    for name, np_dtype, count, offset, shape, view, crc in slice_info.decode_plan:
        arr = np.frombuffer(buffer, dtype=np_dtype, count=count, offset=offset - base_offset)
        # google_crc32c reads the array's bytes in place (no copy)
        if verify and google_crc32c.value(arr) != crc:
            raise CorruptObject(
                f"object {key!r}, slice (dp={slice_info.dp}, cp={slice_info.cp}), tensor {name!r}: "
                f"CRC32C mismatch (stored {crc:#010x})"
            )
        tensor = torch.from_numpy(arr.reshape(shape))
        out[name] = tensor if view is None else tensor.view(view)
    return out


def _open_mmap(path: str, key: str) -> mmap.mmap:
    try:
        with open(open_regular(path, key), "rb") as f:  # never blocks on a FIFO, refuses non-files
            # copy-on-write: tensors are writable, writes never reach the file
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except ValueError as e:  # empty file
        raise CorruptObject(f"object {key!r}: cannot map {path!r}: {e}") from e


class SliceReader:
    """Reads slices of one store's objects, keeping recently used mmaps open.

    The hot path for a warm local object is a dict lookup plus
    :func:`decode_slice`. Mappings are dropped oldest-first (never closed
    explicitly: tensors may still view them) when more than ``cache_size``
    objects are open; the kernel unmaps when the last tensor goes.
    """

    def __init__(self, store: ObjectStore, *, verify: bool = True, cache_size: int = 64) -> None:
        self.store = store
        self.verify = verify
        self.cache_size = cache_size
        self._lock = threading.Lock()
        self._maps: dict[str, mmap.mmap | None] = {}

    def _mapping(self, key: str, size: int) -> mmap.mmap | None:
        # hit: a plain dict read, atomic under the GIL (the hot path takes no lock)
        mm = self._maps.get(key, _MISSING)
        if mm is not _MISSING:
            return mm  # type: ignore[return-value]
        path = self.store.local_path(key)
        mm = _open_mmap(path, key) if path is not None else None
        if mm is not None and len(mm) < size:
            raise CorruptObject(f"object {key!r}: truncated, file has {len(mm)} of {size} bytes")
        with self._lock:
            self._maps[key] = mm
            while len(self._maps) > self.cache_size:  # oldest first
                self._maps.pop(next(iter(self._maps)))
        return mm

    def read(
        self, key: str, footer: Footer, slice_info: SliceInfo, *, verify: bool | None = None
    ) -> dict[str, torch.Tensor]:
        """One slice of ``key`` as tensors: an mmap view locally, one range read remotely."""
        check = self.verify if verify is None else verify
        mm = self._maps.get(key, _MISSING)
        if mm is _MISSING:
            mm = self._mapping(key, footer.size)
        if mm is not None:
            return decode_slice(mm, slice_info, base_offset=0, verify=check, key=key)
        data = self._get(key, slice_info)
        if len(data) != slice_info.length:
            raise CorruptObject(
                f"object {key!r}, slice (dp={slice_info.dp}, cp={slice_info.cp}): truncated, "
                f"read {len(data)} of {slice_info.length} bytes"
            )
        return decode_slice(data, slice_info, base_offset=slice_info.start, verify=check, key=key)

    def _get(self, key: str, slice_info: SliceInfo) -> bytes | bytearray | memoryview:
        """One range read; into a fresh writable buffer when the store can (``get_range_into``)."""
        read_into = getattr(self.store, "get_range_into", None)
        if read_into is None:
            return self.store.get_range(key, slice_info.start, slice_info.end)
        buffer = bytearray(slice_info.length)
        n = read_into(key, slice_info.start, memoryview(buffer))
        return memoryview(buffer)[:n]

    def forget(self, key: str) -> None:
        """Drop the mapping of ``key`` (e.g. before the object is deleted)."""
        with self._lock:
            self._maps.pop(key, None)


def read_slice(
    store: ObjectStore, key: str, footer: Footer, slice_info: SliceInfo, *, verify: bool = True
) -> dict[str, torch.Tensor]:
    """Read one slice: by mmap when ``store.local_path(key)`` is a path, else one range read.

    Opens a fresh mapping per call; use a :class:`SliceReader` on hot paths.
    """
    return SliceReader(store, verify=verify, cache_size=1).read(key, footer, slice_info)
