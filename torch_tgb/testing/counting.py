"""A store wrapper that counts requests per operation (for tests and benchmarks).

Request counts are the currency of the protocol's cost claims (O(1) commits,
O(log n) cold starts, one range read per step); this is how they are measured.
"""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Iterable

from torch_tgb.storage import ObjectInfo, ObjectStore
from torch_tgb.storage._base import Buffer
from torch_tgb.storage._wrapper import ForwardingStore

__all__ = ["CountingStore"]


class CountingStore(ForwardingStore):
    """Counts calls per operation in ``calls``; otherwise passes everything to ``inner``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()
        #: range reads per key (``get_ranges`` and ``get_range_into`` arrive here as ranges too)
        self.range_keys: Counter[str] = Counter()

    def _count(self, op: str) -> None:
        with self._lock:
            self.calls[op] += 1

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.range_keys.clear()

    def range_reads(self, prefix: str = "") -> int:
        """Range reads of keys under ``prefix`` (``"data/"``: the TGB objects) so far."""
        with self._lock:
            return sum(n for key, n in self.range_keys.items() if key.startswith(prefix))

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def get(self, key: str) -> bytes:
        self._count("get")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._count("get_range")
        with self._lock:
            self.range_keys[key] += 1
        return self.inner.get_range(key, start, end)

    def stat(self, key: str) -> ObjectInfo:
        self._count("stat")
        return self.inner.stat(key)

    def exists(self, key: str) -> bool:
        self._count("exists")
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> builtins.list[str]:
        self._count("list")
        return self.inner.list(prefix)

    def put(self, key: str, data: Buffer) -> None:
        self._count("put")
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        self._count("put_if_absent")
        return self.inner.put_if_absent(key, data)

    def delete(self, keys: str | Iterable[str]) -> None:
        self._count("delete")
        self.inner.delete(keys)
