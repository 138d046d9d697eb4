"""The versions a :class:`~torch_tgb.manifest.Manifest` has parsed, and the newest version it knows of.

A version never changes once created, so a parsed one can be kept as long
as there is room (least recently used goes first); the only versions ever
dropped early are those below the GC boundary, where a stalled committer
may have re-created a slot. Thread-safe.

Room is counted in versions and in entries: a parsed entry is a row of an
:class:`~torch_tgb.manifest.records.EntryTable` (~80 bytes), so the default
bound of 2^19 entries holds a reader's cache near 42 MB however many entries
its versions carry, and 512 versions of 1,024 entries (a shuffled epoch's
working set of a busy namespace) fit whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from torch_tgb.manifest.records import Version

__all__ = ["VersionCache"]


#: most parsed entries a cache keeps (over all its versions)
MAX_ENTRIES = 1 << 19


class VersionCache:
    """An LRU of parsed versions holding at most ``size`` versions and ``max_entries`` entries, and the newest
    version number known."""

    def __init__(self, size: int, max_entries: int = MAX_ENTRIES) -> None:
        self._size = size
        self._max_entries = max_entries
        self._entries = 0
        self._lock = threading.Lock()
        self._versions: OrderedDict[int, Version] = OrderedDict()
        self._newest = 0

    @property
    def newest(self) -> int:
        """The newest version known to exist (0: none yet)."""
        with self._lock:
            return self._newest

    def __contains__(self, number: object) -> bool:
        with self._lock:
            return number in self._versions

    def get(self, number: int) -> Version | None:
        with self._lock:
            version = self._versions.get(number)
            if version is not None:
                self._versions.move_to_end(number)
            return version

    def missing(self, numbers: Iterable[int]) -> list[int]:
        """Those of ``numbers`` that are not cached, in order."""
        with self._lock:
            return [n for n in numbers if n not in self._versions]

    def put(self, version: Version) -> None:
        """Keep ``version`` (committed, hence the newest known is at least its number)."""
        with self._lock:
            old = self._versions.pop(version.number, None)
            if old is not None:
                self._entries -= len(old.entries)
            self._versions[version.number] = version
            self._entries += len(version.entries)
            while len(self._versions) > 1 and (len(self._versions) > self._size or self._entries > self._max_entries):
                _, dropped = self._versions.popitem(last=False)
                self._entries -= len(dropped.entries)
            self._newest = max(self._newest, version.number)

    def saw_newest(self, number: int) -> int:
        """Record that version ``number`` exists; returns the newest known."""
        with self._lock:
            self._newest = max(self._newest, number)
            return self._newest

    def pop(self, number: int) -> None:
        with self._lock:
            dropped = self._versions.pop(number, None)
            if dropped is not None:
                self._entries -= len(dropped.entries)

    def drop_below(self, number: int) -> None:
        """Drop the versions below ``number`` (reclaimed, or never to be trusted again)."""
        with self._lock:
            for n in [n for n in self._versions if n < number]:
                self._entries -= len(self._versions.pop(n).entries)
