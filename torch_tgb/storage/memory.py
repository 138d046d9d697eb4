"""In-process store: a dict behind a lock. For tests and single-process demos.

Objects live in a registry keyed by the ``memory://`` namespace name, owned by
the module-private ``_REGISTRY`` so that two ``open_store("memory://x")`` in one
process see the same data (as two clients of one bucket would). Atomicity of
``put_if_absent`` comes from the registry lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from torch_tgb.errors import ObjectNotFound
from torch_tgb.storage._base import Buffer, ObjectInfo, ObjectStore
from torch_tgb.storage._keys import validate_key, validate_prefix

__all__ = ["MemoryStore"]


class _Bucket:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, tuple[bytes, float]] = {}


class _Registry:
    """Named buckets shared by every MemoryStore in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def bucket(self, name: str) -> _Bucket:
        with self._lock:
            return self._buckets.setdefault(name, _Bucket())

    def drop(self, name: str) -> None:
        with self._lock:
            self._buckets.pop(name, None)


_REGISTRY = _Registry()


class MemoryStore(ObjectStore):
    """A namespace held in this process's memory, shared by name."""

    def __init__(self, name: str = "default") -> None:
        self.name = name.strip("/") or "default"
        self.url = f"memory://{self.name}"
        self._bucket = _REGISTRY.bucket(self.name)

    def _key(self, key: str) -> str:
        return validate_key(key, namespace=self.url)

    def get(self, key: str) -> bytes:
        key = self._key(key)
        with self._bucket.lock:
            try:
                return self._bucket.objects[key][0]
            except KeyError:
                raise ObjectNotFound(f"{self.url}: no object {key!r}") from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if not (0 <= start <= end):
            raise ValueError(f"{self.url}: invalid byte range [{start}, {end}) for key {key!r}")
        return self.get(key)[start:end]

    def stat(self, key: str) -> ObjectInfo:
        key = self._key(key)
        with self._bucket.lock:
            try:
                data, mtime = self._bucket.objects[key]
            except KeyError:
                raise ObjectNotFound(f"{self.url}: no object {key!r}") from None
        return ObjectInfo(key, len(data), mtime)

    def exists(self, key: str) -> bool:
        key = self._key(key)
        with self._bucket.lock:
            return key in self._bucket.objects

    def list(self, prefix: str = "") -> list[str]:
        prefix = validate_prefix(prefix, namespace=self.url)
        with self._bucket.lock:
            return sorted(k for k in self._bucket.objects if k.startswith(prefix))

    def put(self, key: str, data: Buffer) -> None:
        key = self._key(key)
        blob = bytes(data)
        with self._bucket.lock:
            self._bucket.objects[key] = (blob, time.time())

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        key = self._key(key)
        blob = bytes(data)
        with self._bucket.lock:
            if key in self._bucket.objects:
                return False
            self._bucket.objects[key] = (blob, time.time())
            return True

    def delete(self, keys: str | Iterable[str]) -> None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        checked = [self._key(k) for k in keys]
        with self._bucket.lock:
            for key in checked:
                self._bucket.objects.pop(key, None)

    def destroy(self) -> None:
        """Drop the whole named bucket (tests use it to start clean)."""
        _REGISTRY.drop(self.name)
        self._bucket = _REGISTRY.bucket(self.name)
