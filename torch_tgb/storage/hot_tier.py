"""A node-local hot tier: a read-through cache of a remote namespace's immutable objects.

What is cached
--------------
Byte ranges of keys under ``data/`` (TGB objects, immutable once written:
a key is never rewritten with other bytes), cached by ``(key, start, end)``
exactly as the reader asks for them: footers and the slices of the ranks on
this node. The manifest log, ``dataset.json``, the GC boundary, snapshots and
watermarks always go to the store: they change, or must be seen fresh. So
the manifest alone decides which steps exist and are readable; the cache only
holds bytes, and an entry of a reclaimed object is never reached, because no
step that the manifest still serves names that object.

A namespace deleted and created again under the same URL must not see the
old bytes: entries live under a directory named by the URL *and* the bytes
of the namespace's ``dataset.json`` (written once per namespace, with its
creation time).

On disk (``cache_dir``, shared by every reader process on the node)::

    v1/<namespace id>/<2 hex>/<sha256(key)[:32]>-<start>-<end>   an entry
    tmp/<pid>-<random>                                           a fill in progress
    lock                                                         flock for eviction

    entry = payload | "TGBK" | crc32c(binding | payload) u32 | len(payload) u64   (little-endian)

The binding (namespace, key, range; see ``_hot_entry``) is covered by the
checksum, so an entry copied over another of the same length is a miss,
never another range's bytes; so is an entry of the older layout (``TGBH``).

Several processes, crashes, full disks
--------------------------------------
* A fill writes a temporary file and renames it onto the entry's name: a
  reader sees the whole entry or none. Two processes filling one entry write
  the same bytes; the last rename wins, harmlessly.
* Every hit is checked against its trailer (magic, length, CRC32C of the
  binding and payload) before a byte is returned: a torn, bit-rotted or
  misplaced entry (power loss without fsync, a bad disk, a copy) is deleted
  and read from the store instead. A process killed mid fill leaves only a
  temporary file, which eviction removes later.
* An entry is opened without blocking or following a symlink and must be a
  regular file: a FIFO (or anything else) planted at its path is a miss,
  removed, never waited on.
* Bounded in bytes with LRU eviction across processes: a hit sets the entry's
  mtime; a process that has filled 1/16 of the budget since its last look
  takes the lock, sums the entries and deletes the least recently used down
  to 90% of ``cache_bytes``. Each process may overshoot by 1/16 of the budget
  between its looks.
* A cache disk that is full, read-only or failing costs the cache, never the
  step: the read is served from the store, a warning is logged (at most once
  a minute), and fills pause for a while after ``ENOSPC``.

The CRC in the trailer is computed on the way in from the bytes received; the
reader still checks each slice against the TGB footer's CRCs under its
``verify`` policy, and ``tgb prewarm`` checks them before it fills.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Sequence

from torch_tgb.errors import TGBError
from torch_tgb.storage._base import Buffer, ObjectStore, RangeFailure, RangeRequest
from torch_tgb.storage._hot_entry import TRAILER_SIZE, DamagedEntry, binding, read_entry, trailer
from torch_tgb.storage._wrapper import ForwardingStore

__all__ = ["HotTierStore", "with_hot_tier"]

log = logging.getLogger(__name__)

_LAYOUT = "v1"
_WARN_EVERY = 60.0  # seconds between warnings about the cache disk
_PAUSE_AFTER_FULL = 30.0  # seconds without fills after ENOSPC
_STALE_TMP = 3600.0  # a temporary file this old belongs to a dead fill
#: keys whose bytes never change once written (TGB objects); everything else passes through
IMMUTABLE_PREFIXES = ("data/",)
#: written once per namespace: its bytes name the namespace's cache directory
IDENTITY_KEY = "_tgb/dataset.json"


def default_cache_bytes(cache_dir: str) -> int:
    """80% of the free space on ``cache_dir``'s file system now (at least 1 MiB)."""
    os.makedirs(cache_dir, exist_ok=True)
    return max(1 << 20, int(shutil.disk_usage(cache_dir).free * 0.8))


class HotTierStore(ForwardingStore):
    """Serves ranges of immutable keys from ``cache_dir``, filling it from ``inner`` on a miss.

    ``cache_bytes`` bounds the whole cache directory (all namespaces in it);
    ``None``: 80% of the free space there at open. Writes, lists and mutable
    keys pass through untouched.
    """

    def __init__(
        self,
        inner: ObjectStore,
        cache_dir: str | os.PathLike[str],
        *,
        cache_bytes: int | None = None,
        cacheable: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(inner)
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.cache_bytes = int(cache_bytes) if cache_bytes is not None else default_cache_bytes(self.cache_dir)
        if self.cache_bytes <= 0:
            raise ValueError(f"cache_bytes must be positive, got {cache_bytes}")
        self._cacheable = cacheable or _immutable
        self._clock = clock
        self._ns_dir: str | None = None
        self._ns_id = ""
        self._filled_since_scan = 0
        self._paused_until = 0.0
        self._warned_at = -_WARN_EVERY
        #: hits, misses, fills, failed fills, entries found damaged, bytes served and filled
        self.counters = dict.fromkeys(
            ("hits", "misses", "fills", "fill_errors", "damaged", "hit_bytes", "fill_bytes"), 0
        )

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    # --- entries -------------------------------------------------------------------

    def _namespace_dir(self) -> str:
        if self._ns_dir is None:
            try:
                identity = hashlib.sha256(self.inner.get(IDENTITY_KEY)).hexdigest()
            except TGBError:
                identity = "-"  # not a TGB namespace (yet): the URL alone names it
            digest = hashlib.sha256(f"{self.url}\n{identity}".encode()).hexdigest()[:24]
            self._ns_id = digest
            self._ns_dir = os.path.join(self.cache_dir, _LAYOUT, digest)
        return self._ns_dir

    def _binding(self, key: str, start: int, end: int) -> bytes:
        """What an entry's checksum covers besides its payload: the namespace, key and range it holds."""
        self._namespace_dir()
        return binding(self._ns_id, key, start, end)

    def entry_path(self, key: str, start: int, end: int) -> str:
        """Where the entry of bytes ``[start, end)`` of ``key`` lives (whether or not it is there)."""
        h = hashlib.sha256(key.encode()).hexdigest()[:32]
        return os.path.join(self._namespace_dir(), h[:2], f"{h}-{start}-{end}")

    def _load(self, path: str, bound: bytes, out: memoryview | None, limit: int) -> bytes | int | None:
        """A checked hit (bytes, or the count read into ``out``), or None: absent, damaged or unreadable.

        ``bound`` (:meth:`_binding`) names what the entry must hold; an entry
        filed for another key, range or namespace fails the CRC like a torn one.
        """
        try:
            payload, length = read_entry(path, bound, out, limit)
        except FileNotFoundError:
            return None
        except DamagedEntry:  # torn, corrupt, misplaced or no file: never served; removed for a refill
            self._count("damaged", 1)
            _unlink(path)
            return None
        except OSError as e:
            self._warn(f"reading the hot tier failed ({e}); reading from the store instead")
            return None
        try:
            os.utime(path, follow_symlinks=False)  # LRU: recently used
        except OSError:
            pass
        self._count("hits", 1)
        self._count("hit_bytes", length)
        if out is not None and isinstance(payload, memoryview):
            return length
        return bytes(payload)

    def fill(self, key: str, start: int, end: int, data: Buffer) -> bool:
        """Store ``data`` as the entry of ``[start, end)`` of ``key``; False if the cache declined or failed."""
        view = memoryview(data)
        if not self._cacheable(key) or view.nbytes + TRAILER_SIZE > self.cache_bytes // 4:
            return False
        if self._clock() < self._paused_until:
            return False
        path = self.entry_path(key, start, end)
        tmp = os.path.join(self.cache_dir, "tmp", f"{os.getpid()}-{uuid.uuid4().hex}")
        try:
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(view)
                f.write(trailer(view, self._binding(key, start, end)))
            os.replace(tmp, path)  # atomic: readers see the whole entry or none
        except OSError as e:
            _unlink(tmp)
            self._count("fill_errors", 1)
            if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
                self._paused_until = self._clock() + _PAUSE_AFTER_FULL
                self._filled_since_scan = self.cache_bytes  # look (and evict) before the next fill
            self._warn(f"the hot tier cannot store {key!r} ({e}); reads go to the store uncached")
            return False
        self._count("fills", 1)
        self._count("fill_bytes", view.nbytes)
        self._filled_since_scan += view.nbytes + TRAILER_SIZE
        if self._filled_since_scan > self.cache_bytes // 16:
            self.evict()
        return True

    def evict(self) -> int:
        """Delete the least recently used entries down to 90% of ``cache_bytes``; the bytes left."""
        self._filled_since_scan = 0
        try:
            with open(os.path.join(self.cache_dir, "lock"), "a+b") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one evicting process at a time
                return self._evict_locked()
        except OSError as e:
            self._warn(f"evicting from the hot tier failed ({e})")
            return -1

    def _evict_locked(self) -> int:
        entries: list[tuple[float, int, str]] = []
        for path in _files(os.path.join(self.cache_dir, _LAYOUT), depth=3):
            try:
                st = os.stat(path)
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, path))
        now = time.time()
        for path in _files(os.path.join(self.cache_dir, "tmp"), depth=1):
            try:
                if now - os.stat(path).st_mtime > _STALE_TMP:
                    _unlink(path)  # the fill of a process that died
            except OSError:
                continue
        total = sum(size for _, size, _ in entries)
        if total <= self.cache_bytes:
            return total
        target = int(self.cache_bytes * 0.9)
        for _, size, path in sorted(entries):
            if total <= target:
                break
            _unlink(path)
            total -= size
        return total

    def _warn(self, message: str) -> None:
        now = self._clock()
        if now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            log.warning("%s: %s (cache_dir=%s)", self.url, message, self.cache_dir)

    # --- reads -----------------------------------------------------------------------

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if not self._cacheable(key) or start >= end:
            return self.inner.get_range(key, start, end)
        hit = self._load(self.entry_path(key, start, end), self._binding(key, start, end), None, end - start)
        if isinstance(hit, bytes):
            return hit
        self._count("misses", 1)
        data = self.inner.get_range(key, start, end)
        self.fill(key, start, end, data)
        return data

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        end = start + len(out)
        if not self._cacheable(key) or start >= end:
            return self.inner.get_range_into(key, start, out)
        hit = self._load(self.entry_path(key, start, end), self._binding(key, start, end), out, end - start)
        if isinstance(hit, int):
            return hit
        if isinstance(hit, bytes):  # pragma: no cover - _load reads into out whenever it fits
            out[: len(hit)] = hit
            return len(hit)
        self._count("misses", 1)
        n = self.inner.get_range_into(key, start, out)
        self.fill(key, start, end, out[:n])
        return n

    def get_ranges(
        self, requests: Sequence[RangeRequest], *, continue_on_error: bool = False
    ) -> builtins.list[bytes | RangeFailure]:
        """Hits from the cache; the misses in one batch from the store (its parallel range reads), then filled."""
        results: list[bytes | RangeFailure | None] = [None] * len(requests)
        missing: list[int] = []
        for i, r in enumerate(requests):
            hit = self._load(self.entry_path(r.key, r.start, r.end), self._binding(r.key, r.start, r.end),
                             None, r.length) if (
                self._cacheable(r.key) and r.start < r.end) else None
            if isinstance(hit, bytes):
                results[i] = hit
            else:
                missing.append(i)
        if missing:
            self._count("misses", sum(1 for i in missing if self._cacheable(requests[i].key)))
            fetched = self.inner.get_ranges([requests[i] for i in missing], continue_on_error=continue_on_error)
            for i, value in zip(missing, fetched):
                results[i] = value
                r = requests[i]
                if isinstance(value, bytes) and r.start < r.end:
                    self.fill(r.key, r.start, r.end, value)
        return [r for r in results if r is not None]

    # --- writes, lists, whole gets and mutable keys pass through (ForwardingStore) ----------

    def delete(self, keys: str | Iterable[str]) -> None:
        """Deletes from the store, then this node's entries of those keys (other nodes' age out)."""
        keys = [keys] if isinstance(keys, str) else builtins.list(keys)
        self.inner.delete(keys)
        self.forget(keys)

    def forget(self, keys: Iterable[str] | None = None) -> None:
        """Drop this node's entries of ``keys`` (the store keeps the objects); ``None``: of the whole namespace."""
        if keys is None:
            shutil.rmtree(self._namespace_dir(), ignore_errors=True)
            return
        for key in keys:
            if not self._cacheable(key):
                continue
            probe = self.entry_path(key, 0, 0)
            head = os.path.basename(probe)[: -len("-0-0")] + "-"
            for path in _files(os.path.dirname(probe), depth=1):
                if os.path.basename(path).startswith(head):
                    _unlink(path)

    def local_path(self, key: str) -> str | None:
        return None  # every read goes through the checks above

    def __repr__(self) -> str:
        return f"HotTierStore({self.inner!r}, cache_dir={self.cache_dir!r}, cache_bytes={self.cache_bytes})"


def with_hot_tier(store: ObjectStore, cache_dir: str | os.PathLike[str] | None, cache_bytes: int | None = None) -> ObjectStore:
    """``store`` behind a :class:`HotTierStore` when ``cache_dir`` is set and the namespace is remote.

    A namespace on a local disk (one whose objects have a local path) is
    returned as it is: it is its own hot tier.
    """
    if cache_dir is None:
        return store
    if store.local_path(IDENTITY_KEY) is not None:
        return store
    return HotTierStore(store, cache_dir, cache_bytes=cache_bytes)


def _immutable(key: str) -> bool:
    return key.startswith(IMMUTABLE_PREFIXES)


def _files(root: str, *, depth: int) -> Iterable[str]:
    """Paths of the files ``depth`` directory levels below ``root`` (nothing if it is missing)."""
    try:
        entries = builtins.list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        if depth <= 1:
            if entry.is_file(follow_symlinks=False):
                yield entry.path
        elif entry.is_dir(follow_symlinks=False):
            yield from _files(entry.path, depth=depth - 1)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
