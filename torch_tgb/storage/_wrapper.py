"""Base classes of stores that wrap another store (retries, faults, latency, counting, test hooks)."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable

from torch_tgb.storage._base import Buffer, ObjectInfo, ObjectStore, PartialObject

__all__ = ["ForwardingStore", "StoreWrapper"]


class StoreWrapper(ObjectStore):
    """Shares the inner store's ``url``, closes it, and owns a lock for the wrapper's own state.

    Wrappers travel into DataLoader workers, so they pickle: the lock is
    dropped and recreated on the other side.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def check_root(self) -> None:
        self.inner.check_root()

    # Partial writes live where the inner store keeps them: every wrapper shows and removes the same ones.
    def list_partial(self, prefix: str = "") -> builtins.list[PartialObject]:
        return self.inner.list_partial(prefix)

    def delete_partial(self, partials: Iterable[PartialObject]) -> None:
        self.inner.delete_partial(partials)

    def close(self) -> None:
        self.inner.close()


class ForwardingStore(StoreWrapper):
    """Forwards every operation to ``inner`` unchanged; subclasses override what they intercept.

    The building block of test and instrumentation stores (counting,
    hooks, simulated crashes): each overrides only the calls it cares about.
    """

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.max_in_flight = inner.max_in_flight

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.inner.get_range(key, start, end)

    def stat(self, key: str) -> ObjectInfo:
        return self.inner.stat(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> builtins.list[str]:
        return self.inner.list(prefix)

    def put(self, key: str, data: Buffer) -> None:
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        return self.inner.put_if_absent(key, data)

    def delete(self, keys: str | Iterable[str]) -> None:
        self.inner.delete(keys)

    def local_path(self, key: str) -> str | None:
        # Forwarded like everything else, so a wrapped LocalStore keeps its mmap path; a wrapper
        # that must see every read (faults, latency models) returns None itself.
        return self.inner.local_path(key)
