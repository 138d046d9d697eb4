"""Helpers for manifest tests: entries without real TGB objects, a request-counting store."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

from torch_tgb.manifest import Committer, Manifest, TGBEntry
from torch_tgb.storage import ObjectInfo, ObjectStore


def entry(producer: str, offset: int, *, size: int = 128) -> TGBEntry:
    """An entry whose object need not exist (the manifest never opens objects)."""
    return TGBEntry(f"data/{producer}/o{offset:08d}.tgb", size, size - 32, 8, producer, offset, 4, 0)


def entries(producer: str, start: int, n: int) -> list[TGBEntry]:
    return [entry(producer, o) for o in range(start, start + n)]


def started(store: ObjectStore, producer: str, **kwargs: object) -> Committer:
    committer = Committer(Manifest(store, **kwargs), producer)  # type: ignore[arg-type]
    committer.start()
    return committer


def commit(committer: Committer, n: int) -> int:
    """Commit the next ``n`` offsets of the committer's producer in one version; returns the version."""
    result = committer.attempt(entries(committer.producer_id, committer.next_offset, n))
    if not result.committed:
        raise AssertionError(f"commit failed: {result}")
    return result.version


class CountingStore(ObjectStore):
    """Counts calls per operation; otherwise passes through."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, op: str) -> None:
        with self._lock:
            self.calls[op] += 1

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def get(self, key: str) -> bytes:
        self._count("get")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._count("get_range")
        return self.inner.get_range(key, start, end)

    def stat(self, key: str) -> ObjectInfo:
        self._count("stat")
        return self.inner.stat(key)

    def exists(self, key: str) -> bool:
        self._count("exists")
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> list[str]:
        self._count("list")
        return self.inner.list(prefix)

    def put(self, key: str, data: bytes | memoryview) -> None:
        self._count("put")
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        self._count("put_if_absent")
        return self.inner.put_if_absent(key, data)

    def delete(self, keys: str | Iterable[str]) -> None:
        self._count("delete")
        self.inner.delete(keys)


class HookStore(CountingStore):
    """Runs ``action()`` once, right after the first call of ``op`` on a key that ``match`` accepts."""

    def __init__(self, inner: ObjectStore, op: str, match, action) -> None:
        super().__init__(inner)
        self.op, self.match, self.action, self.fired = op, match, action, False

    def _after(self, op: str, key: str) -> None:
        if not self.fired and op == self.op and self.match(key):
            self.fired = True
            self.action()

    def get(self, key: str) -> bytes:
        try:
            return super().get(key)
        finally:
            self._after("get", key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            return super().get_range(key, start, end)
        finally:
            self._after("get", key)

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        created = super().put_if_absent(key, data)
        self._after("put_if_absent", key)
        return created


def reclaim_to(store: ObjectStore, version: int) -> None:
    """What the Reclaimer does: snapshot, boundary, then delete below."""
    m = Manifest(store)
    m.write_snapshot(version)
    m.advance_gc_boundary(version, m.read_version(version).first_step)
    m.delete_versions_below(version)
