"""The versions a :class:`~torch_tgb.manifest.Manifest` has parsed, and the newest version it knows of.

A version never changes once created, so a parsed one can be kept as long
as there is room (least recently used goes first); the only versions ever
dropped early are those below the GC boundary, where a stalled committer
may have re-created a slot. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from torch_tgb.manifest.records import Version

__all__ = ["VersionCache"]


class VersionCache:
    """An LRU of parsed versions holding at most ``size``, and the newest version number known."""

    def __init__(self, size: int) -> None:
        self._size = size
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
            self._versions[version.number] = version
            self._versions.move_to_end(version.number)
            while len(self._versions) > self._size:
                self._versions.popitem(last=False)
            self._newest = max(self._newest, version.number)

    def saw_newest(self, number: int) -> int:
        """Record that version ``number`` exists; returns the newest known."""
        with self._lock:
            self._newest = max(self._newest, number)
            return self._newest

    def pop(self, number: int) -> None:
        with self._lock:
            self._versions.pop(number, None)

    def drop_below(self, number: int) -> None:
        """Drop the versions below ``number`` (reclaimed, or never to be trusted again)."""
        with self._lock:
            for n in [n for n in self._versions if n < number]:
                del self._versions[n]
