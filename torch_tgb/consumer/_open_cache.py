"""What a fresh reader of a local namespace reuses from the readers of it before, in this process.

Committed TGBs never change: an object's footers, and the CRC32Cs a reader
checked of its byte ranges, are the same for every later reader; so are the
manifest entries of committed steps, and once the namespace is sealed, its
head and ``dataset.json``. A fresh reader otherwise pays for all of them again
at its open: on a 1,024-step namespace of 32x512 rows that was 27 ms, about
one whole pass of the raw memmap floor (``benchmarks/_labels_read.py``).

:data:`OPEN_CACHE` keeps, per namespace (at most :data:`MAX_NAMESPACES`, least
recently opened dropped first), a :class:`KnownNamespace`:

- ``dataset.json`` as parsed (layout, schema, metadata);
- the sealed head (only once a reader saw the seal), served by
  :class:`CachedView`, the manifest view a reader's poller then asks;
- the entries of whole committed step ranges a reader asked the manifest for
  (:meth:`KnownNamespace.entries`; at most :data:`MAX_ENTRIES` entries);
- each footer run a run-path reader parsed (:class:`SharedFooters`, the
  reader's ``SliceReader``; at most :data:`MAX_TGBS` TGBs), and the byte ranges
  whose CRC32Cs were checked (``verify="first"`` then means: first in this
  process). Every reader maps the objects itself: a trainer that writes into a
  delivered view changes its own reader's private pages, never another's.

Only a namespace the reader opened from a local path is cached (a store handed
in is the caller's to instrument), and only while it is the same namespace:
each open compares ``dataset.json``'s inode, size and mtime and the GC
boundary (:func:`identity_of`) with what the cache holds, and once it holds
the sealed head, that no version landed after it (an excision writes one,
``manifest/replace.py``), so a namespace removed and written again at the
same path, reclaimed below or excised starts a new entry; entries are kept
per replacement view (the version a reader pinned). ``ReaderOptions(open_cache=False)`` leaves a reader out.

This is the one piece of process-wide state of the consumer: a cache of
immutable facts, bounded, thread-safe, and checked at every use. What it
trusts: committed versions and objects are never rewritten in place (the
protocol writes each once); a version or object rewritten by a hostile
writer after a reader in this process checked it is not checked again by
later readers of the process. A fresh process checks everything; readers of
namespaces that untrusted parties can write set ``open_cache=False``.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from torch_tgb.consumer._written import Written
from torch_tgb.format import SliceReader, SliceRun, parse_footer_run
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import DATASET_KEY
from torch_tgb.manifest.records import GCBoundary, ManifestState, TGBEntry
from torch_tgb.storage import ObjectStore

__all__ = ["MAX_ENTRIES", "MAX_NAMESPACES", "MAX_TGBS", "OPEN_CACHE", "CachedView", "KnownNamespace", "OpenCache",
           "SharedFooters", "identity_of"]

#: namespaces the cache remembers (least recently opened dropped first)
MAX_NAMESPACES = 8
#: manifest entries kept per namespace (about 0.8 KB each as TGBEntry objects)
MAX_ENTRIES = 1 << 15
#: TGBs whose parsed footer runs are kept per namespace (a few dozen bytes each)
MAX_TGBS = 1 << 17

#: what tells one namespace at a path from another written there later, and a reclamation from none
Identity = tuple[int, int, int, int, GCBoundary]


def identity_of(store: ObjectStore, manifest: Manifest) -> Identity | None:
    """``dataset.json``'s (device, inode, size, mtime) and the stored GC boundary; None: no namespace (yet)."""
    path = store.local_path(DATASET_KEY)
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, manifest.stored_gc_boundary()


def _written_after_seal(store: ObjectStore, manifest: Manifest, known: KnownNamespace) -> bool:
    """Whether a version landed after the sealed head the cache holds (an excision's replacement version)."""
    sealed = known.sealed
    return sealed is not None and store.exists(manifest.version_key(sealed.version + 1))


class _Bounded:
    """An LRU of values weighted by a count, holding at most ``limit`` in all (a value over it is not kept)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._held = 0

    def get(self, key: Hashable) -> Any:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: Hashable, value: Any, weight: int) -> None:
        if weight > self.limit or key in self._items:
            return
        self._items[key] = (value, weight)
        self._held += weight
        while self._held > self.limit:
            _, (_, dropped) = self._items.popitem(last=False)
            self._held -= dropped


class KnownNamespace:
    """What readers of one namespace learnt that a later reader may reuse. Thread-safe."""

    def __init__(self, identity: Identity, written: Written) -> None:
        self.identity = identity
        self.written = written
        #: the head once sealed (None before a reader saw the seal)
        self.sealed: ManifestState | None = None
        #: byte ranges whose CRCs a reader checked: (key, start) -> None, oldest first (the SliceReaders share it)
        self.verified: dict[tuple[str, int], None] = {}
        self._lock = threading.Lock()
        self._entries = _Bounded(MAX_ENTRIES)
        self._replaced: dict[int, Any] = {}  # version -> its replacements' reference (versions never change)
        self._footers = _Bounded(MAX_TGBS)

    def replaced_at(self, version: int, read: Callable[[], Any]) -> Any:
        """Version ``version``'s replacements reference (``Version.replaced``): remembered, or ``read`` once."""
        with self._lock:
            if version in self._replaced:
                return self._replaced[version]
        ref = read()
        with self._lock:
            if len(self._replaced) >= 64:
                self._replaced.pop(next(iter(self._replaced)))
            self._replaced[version] = ref
        return ref

    def entries(self, start: int, stop: int, read: Callable[[int, int], list[TGBEntry]], *, view: int | None = None
                ) -> list[TGBEntry]:
        """Entries of steps ``[start, stop)`` under replacement view ``view`` (the manifest version a reader pinned:
        an excision replaces entries, ``manifest/replace.py``): remembered, or ``read`` and remembered when all
        are committed."""
        with self._lock:
            known = self._entries.get((start, stop, view))
        if known is not None:
            return list(known)
        entries = read(start, stop)
        if len(entries) == stop - start:  # committed steps never change; a short answer may grow
            with self._lock:
                self._entries.put((start, stop, view), tuple(entries), len(entries))
        return entries

    def footer_run(self, key: Hashable) -> Any:
        with self._lock:
            return self._footers.get(key)

    def keep_footer_run(self, key: Hashable, parsed: Any, tgbs: int) -> None:
        with self._lock:
            self._footers.put(key, parsed, tgbs)


class OpenCache:
    """Namespaces by their local path, each a :class:`KnownNamespace` while its :func:`identity_of` holds."""

    def __init__(self, size: int = MAX_NAMESPACES) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._known: OrderedDict[str, KnownNamespace] = OrderedDict()

    @staticmethod
    def path_of(store: ObjectStore) -> str | None:
        """The key of ``store``'s namespace: its ``dataset.json``'s real path (None: not a local namespace)."""
        path = store.local_path(DATASET_KEY)
        return None if path is None else os.path.realpath(path)

    def lookup(self, store: ObjectStore, manifest: Manifest) -> KnownNamespace | None:
        """The namespace of ``store`` as known, if it is still the same one (else it is forgotten)."""
        path = self.path_of(store)
        if path is None:
            return None
        with self._lock:
            known = self._known.get(path)
        if known is None:
            return None
        if identity_of(store, manifest) != known.identity or _written_after_seal(store, manifest, known):
            with self._lock:
                if self._known.get(path) is known:
                    del self._known[path]
            return None
        with self._lock:
            if path in self._known:
                self._known.move_to_end(path)
        return known

    def remember(self, store: ObjectStore, manifest: Manifest, written: Written
                 ) -> KnownNamespace | None:
        """A new entry for ``store``'s namespace (whose ``dataset.json`` says ``written``); None: not cacheable."""
        path = self.path_of(store)
        identity = None if path is None else identity_of(store, manifest)
        if path is None or identity is None:
            return None
        known = KnownNamespace(identity, written)
        with self._lock:
            self._known[path] = known
            self._known.move_to_end(path)
            while len(self._known) > self._size:
                self._known.popitem(last=False)
        return known

    def clear(self) -> None:
        """Forget every namespace (tests; a process that rewrites namespaces in place it read)."""
        with self._lock:
            self._known.clear()


#: the process's cache (see the module docstring); DataLoader workers inherit a copy when forked
OPEN_CACHE = OpenCache()


class CachedView:
    """The manifest as a reader's poller sees it, with a sealed head and whole committed ranges remembered.

    ``head()`` is the manifest's until it says sealed; from then on (and from
    the start, when an earlier reader saw the seal) the remembered one: a
    sealed namespace never changes. ``entries()`` goes through
    :meth:`KnownNamespace.entries`.
    """

    def __init__(self, manifest: Manifest, known: KnownNamespace) -> None:
        self.manifest = manifest
        self.known = known

    @property
    def url(self) -> str:
        return self.manifest.url

    def head(self) -> ManifestState:
        sealed = self.known.sealed
        if sealed is not None:
            return sealed
        head = self.manifest.head()
        if head.sealed:
            self.known.sealed = head
        return head

    def entries(self, start_step: int, stop_step: int) -> list[TGBEntry]:
        view = self.manifest.replacements.pinned  # None: each call applies the newest replacements: not kept
        if view is None:
            return self.manifest.entries(start_step, stop_step)
        return self.known.entries(start_step, stop_step, self.manifest.entries, view=view)


class SharedFooters(SliceReader):
    """A ``SliceReader`` whose footer-run parses, and CRC-checked ranges, are its namespace's (:class:`KnownNamespace`).

    Each run is parsed once per process (keyed by object, size, TGBs, slices and
    names); the mapping it is read through is still this reader's own.
    """

    def __init__(self, store: ObjectStore, known: KnownNamespace, **settings: Any) -> None:
        super().__init__(store, **settings)
        self.known = known
        self.share_verified(known.verified)

    def runs(
        self, key: str, size: int, tgbs: Sequence[tuple[int, int]], slices: Sequence[tuple[int, int]],
        names: frozenset[str] | None = None,
    ) -> tuple[SliceRun, ...] | None:
        mm = self.mapping(key, size)
        if mm is None:
            return None
        memo = (key, size, tuple(tgbs), tuple(slices), names)
        parsed = self.known.footer_run(memo)
        if parsed is None:
            footers = parse_footer_run(mm, tgbs, key=key, contract=self.contract)
            parsed = (footers.shifts, tuple(footers.slice_run(dp, cp, names) for dp, cp in slices))
            self.known.keep_footer_run(memo, parsed, len(footers.shifts))
        shifts, infos = parsed
        return tuple(SliceRun(self, key, mm, info, shifts, crcs) for info, crcs in infos)
