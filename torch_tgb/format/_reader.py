"""Reading TGB objects: the footer, then one slice as tensors with no payload copy (``_decode.py``).

Local objects (``store.local_path(key)`` is a path) are memory-mapped
copy-on-write (``ACCESS_COPY``): tensors view the page cache, and a trainer
that modifies a batch in place changes its private pages, never the file.
Remote objects (and local ones under ``mode="copy"``) are read with one
range read per slice into a fresh writable buffer that becomes the tensors'
storage. CRC32C is checked per tensor as the verify policy says.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from torch_tgb.errors import CorruptObject
from torch_tgb.format._contract import Contract
from torch_tgb.format._decode import ByteSource, decode_slice, writable
from torch_tgb.format._footer import TRAILER_SIZE, parse_footer, parse_trailer
from torch_tgb.format._footer_view import Footer, SliceInfo
from torch_tgb.format._run import parse_footer_run
from torch_tgb.format._slice_run import SliceRun
from torch_tgb.storage._regular import open_regular

if TYPE_CHECKING:
    from torch_tgb.storage import ObjectStore

__all__ = [
    "READ_MODES",
    "VERIFY_POLICIES",
    "SliceReader",
    "SliceRun",
    "decode_slice",
    "read_footer",
    "read_slice",
    "verify_policy",
    "writable",
]

#: a cache-miss marker of the cache's own value type (compared by identity), so no lookup needs a cast
_MISSING = bytearray()

#: bytes read from the end of an object when the footer location is unknown
TAIL_READ = 64 << 10

def read_footer(
    store: ObjectStore,
    key: str,
    *,
    size: int | None = None,
    footer_offset: int | None = None,
    footer_length: int | None = None,
    contract: Contract | None = None,
) -> Footer:
    """Read and parse the footer of ``key`` (judged by the namespace's ``contract``, when given).

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
        return parse_footer(store.get_range(key, footer_offset, size), key=key, size=size, footer_offset=footer_offset,
                            contract=contract)
    tail_start = max(0, size - TAIL_READ)
    tail = store.get_range(key, tail_start, size)
    if len(tail) != size - tail_start:
        raise CorruptObject(f"object {key!r}: truncated, read {len(tail)} of {size - tail_start} tail bytes")
    offset, _length = parse_trailer(tail, key=key, size=size)
    rest = memoryview(tail)[offset - tail_start :] if offset >= tail_start else store.get_range(key, offset, size)
    return parse_footer(rest, key=key, size=size, footer_offset=offset, contract=contract)


def _open_local(path: str, key: str, read_below: int) -> mmap.mmap | bytearray:
    """The object at ``path``: read whole into a private buffer if smaller than ``read_below``, else mapped.

    Mapping costs a few dozen microseconds per object (mmap, page faults,
    munmap); below about 256 KiB one ``readv`` into a bytearray is several
    times cheaper, and a private buffer cannot SIGBUS.
    """
    fd = open_regular(path, key)  # never blocks on a FIFO, refuses non-files
    try:
        size = os.fstat(fd).st_size
        if size < read_below:
            buffer = bytearray(size)
            got = 0
            while got < size:
                n = os.preadv(fd, [memoryview(buffer)[got:]], got)
                if n <= 0:
                    return buffer[:got]  # shrank while reading: the length check reports it
                got += n
            return buffer
        # copy-on-write: tensors are writable, writes never reach the file
        return mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
    except ValueError as e:  # empty file
        raise CorruptObject(f"object {key!r}: cannot map {path!r}: {e}") from e
    finally:
        os.close(fd)


#: how local objects are read: mapped (zero-copy) or copied into private buffers
READ_MODES = ("mmap", "copy")
#: when tensor CRCs are checked: once per byte range, on every read, or never
VERIFY_POLICIES = ("first", "always", "never")
#: byte ranges remembered as verified (per reader; older ones are verified again)
_VERIFIED_MAX = 1 << 16
#: what TGBDataset passes as ``read_whole_below``: smaller local objects are read whole (see _open_local)
READ_WHOLE_BELOW = 256 << 10


def verify_policy(verify: bool | str) -> str:
    """``"first"``, ``"always"`` or ``"never"``; ``True``/``False`` mean ``"always"``/``"never"``."""
    if verify is True or verify is False:
        return "always" if verify else "never"
    if verify not in VERIFY_POLICIES:
        raise ValueError(f"verify must be one of {VERIFY_POLICIES} (or a bool), got {verify!r}")
    return str(verify)


class SliceReader:
    """Reads slices of one store's objects, keeping recently used objects open.

    ``mode="mmap"`` (default) maps a local object once (containment checked
    at that open) and serves every later slice of it, and of every TGB of a
    segment object, as a view: the hot path is a dict lookup plus
    :func:`decode_slice`. An object smaller than ``read_whole_below``
    (default 0: map everything; TGBDataset passes :data:`READ_WHOLE_BELOW`)
    is read whole into a private buffer at that open instead, cheaper than a
    mapping for small one-TGB objects. Mappings are dropped oldest-first (never closed
    explicitly: tensors may still view them) when more than ``cache_size``
    objects are open; the kernel unmaps when the last tensor goes. A mapped
    file truncated in place raises SIGBUS on access, which Python cannot
    catch; ``mode="copy"`` reads every slice into a private buffer instead
    (a truncated object is then a :class:`CorruptObject`), see
    docs/operations.md. Remote objects are always read into a fresh
    writable buffer.

    ``verify`` (see :func:`verify_policy`): ``"first"`` checks a byte range's
    CRCs the first time this reader delivers it and never again,
    ``"always"`` on every read, ``"never"`` not at all. ``contract``: the
    namespace's, which every footer this reader parses (:meth:`runs`) is
    judged by, whatever the verify policy.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        verify: bool | str = True,
        cache_size: int = 64,
        mode: str = "mmap",
        read_whole_below: int = 0,
        contract: Contract | None = None,
    ) -> None:
        if mode not in READ_MODES:
            raise ValueError(f"mode must be one of {READ_MODES}, got {mode!r}")
        self.store = store
        self.verify = verify_policy(verify)
        self.cache_size = cache_size
        self.mode = mode
        self.read_whole_below = read_whole_below
        self.contract = contract
        self._lock = threading.Lock()
        self._maps: dict[str, mmap.mmap | bytearray | None] = {}
        self._verified: dict[tuple[str, int], None] = {}  # insertion-ordered: oldest dropped first

    def _mapping(self, key: str, size: int) -> mmap.mmap | bytearray | None:
        # hit: a plain dict read, atomic under the GIL (the hot path takes no lock)
        mm = self._maps.get(key, _MISSING)
        if mm is not _MISSING:
            return mm
        path = self.store.local_path(key) if self.mode == "mmap" else None
        mm = _open_local(path, key, self.read_whole_below) if path is not None else None
        if mm is not None and len(mm) < size:
            raise CorruptObject(f"object {key!r}: truncated, file has {len(mm)} of {size} bytes")
        with self._lock:
            self._maps[key] = mm
            while len(self._maps) > self.cache_size:  # oldest first
                self._maps.pop(next(iter(self._maps)))
        return mm

    def mapping(self, key: str, size: int) -> mmap.mmap | bytearray | None:
        """The open mapping (or whole-read buffer) of local object ``key`` of ``size`` bytes; None: not mapped."""
        return self._mapping(key, size)

    def share_verified(self, verified: dict[tuple[str, int], None]) -> None:
        """Remember CRC-checked ranges in ``verified``, shared by readers of the same immutable objects."""
        self._verified = verified

    def view(self, key: str, start: int, end: int) -> memoryview | None:
        """Bytes ``[start, end)`` of a mapped local object, or None (remote, or ``mode="copy"``)."""
        mm = self._maps.get(key, _MISSING)
        if mm is _MISSING:
            mm = self._mapping(key, end)
        if mm is None:
            return None
        if len(mm) < end:
            raise CorruptObject(f"object {key!r}: truncated, file has {len(mm)} of {end} bytes")
        return memoryview(mm)[start:end]

    def _check(self, key: str, slice_info: SliceInfo, verify: str) -> bool:
        """Whether to check this byte range's CRCs now (``_mark`` remembers it once checked)."""
        if verify == "never":
            return False
        if verify == "always":
            return True
        return (key, slice_info.start) not in self._verified

    def _mark(self, key: str, slice_info: SliceInfo) -> None:
        self._mark_range(key, slice_info.start)

    def _mark_range(self, key: str, start: int) -> None:
        verified = self._verified
        verified[(key, start)] = None  # one dict store: atomic under the GIL, no lock on the hot path
        if len(verified) > _VERIFIED_MAX:
            with self._lock:
                while len(verified) > _VERIFIED_MAX:
                    verified.pop(next(iter(verified)))

    def run(
        self, key: str, size: int, tgbs: Sequence[tuple[int, int]], dp: int, cp: int = 0,
        names: frozenset[str] | None = None,
    ) -> SliceRun | None:
        """Slice ``(dp, cp)`` of a leading run of consecutive TGBs of the mapped object ``key``.

        ``tgbs`` are ``(footer_offset, size)`` of the TGBs, as their manifest
        entries say; ``size`` is the object's (checked against the file at its
        first open). The run covers at least the first TGB (see
        :func:`parse_footer_run`); None when ``key`` is not mapped (remote, or
        ``mode="copy"``).
        """
        runs = self.runs(key, size, tgbs, ((dp, cp),), names)
        return None if runs is None else runs[0]

    def runs(
        self, key: str, size: int, tgbs: Sequence[tuple[int, int]], slices: Sequence[tuple[int, int]],
        names: frozenset[str] | None = None,
    ) -> tuple[SliceRun, ...] | None:
        """:meth:`run` for several slices ``(dp, cp)`` of the same TGBs: one footer parse, a SliceRun per slice.

        ``names``: read only those tensors of each slice (None: all).
        """
        mm = self._mapping(key, size)  # once per run: no need for read()'s inlined cache hit
        if mm is None:
            return None
        footers = parse_footer_run(mm, tgbs, key=key, contract=self.contract)
        out = []
        for dp, cp in slices:
            info, crcs = footers.slice_run(dp, cp, names)
            out.append(SliceRun(self, key, mm, info, footers.shifts, crcs))
        return tuple(out)

    def read(
        self, key: str, footer: Footer, slice_info: SliceInfo, *, verify: bool | str | None = None
    ) -> dict[str, torch.Tensor]:
        """One slice of ``key`` as tensors: a view of the mapping locally, else a private buffer."""
        policy = self.verify if verify is None else verify_policy(verify)
        check = self._check(key, slice_info, policy)
        mm = self._maps.get(key, _MISSING)
        if mm is _MISSING:
            mm = self._mapping(key, footer.size)
        if mm is not None:
            out = decode_slice(mm, slice_info, base_offset=0, verify=check, key=key)
        else:
            out = self.decode(key, self._get(key, slice_info), slice_info, verify=check)
        if check and policy == "first":
            self._mark(key, slice_info)
        return out

    def decode(self, key: str, data: ByteSource, slice_info: SliceInfo, *, verify: bool) -> dict[str, torch.Tensor]:
        """Tensors of ``slice_info`` over ``data`` (its bytes), checked for length."""
        if len(data) != slice_info.length:
            raise CorruptObject(
                f"object {key!r}, slice (dp={slice_info.dp}, cp={slice_info.cp}): truncated, "
                f"read {len(data)} of {slice_info.length} bytes"
            )
        return decode_slice(data, slice_info, base_offset=slice_info.start, verify=verify, key=key)

    def read_fetched(self, key: str, data: ByteSource, slice_info: SliceInfo) -> dict[str, torch.Tensor]:
        """Tensors of a slice fetched elsewhere (a batched remote read), under this reader's policy.

        Immutable ``bytes`` are copied into a writable buffer first: tensors
        must never view a Python bytes object (an in-place ``+=`` on the
        batch would write into it).
        """
        check = self._check(key, slice_info, self.verify)
        # a coded slice decodes into a fresh buffer: its fetched bytes are only read
        out = self.decode(key, data if slice_info.coded else writable(data), slice_info, verify=check)
        if check and self.verify == "first":
            self._mark(key, slice_info)
        return out

    def _get(self, key: str, slice_info: SliceInfo) -> bytearray | memoryview:
        """One range read into a fresh writable buffer.

        Straight into the buffer when the store's class reads in place
        (overrides ``get_range_into``); otherwise one ``get_range`` copied
        into a bytearray (what the default ``get_range_into`` does, without
        bypassing wrappers that only intercept ``get_range``).
        """
        from torch_tgb.storage import ObjectStore  # a lower layer; lazily, off the mapped hot path

        read_into = getattr(type(self.store), "get_range_into", None)
        if read_into is None or read_into is ObjectStore.get_range_into:
            data = self.store.get_range(key, slice_info.start, slice_info.end)
            return data if isinstance(data, bytearray) else bytearray(data)
        buffer = bytearray(slice_info.length)
        n = self.store.get_range_into(key, slice_info.start, memoryview(buffer))
        return buffer if n == len(buffer) else memoryview(buffer)[:n]

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
