"""Base class of stores that wrap another store (retries, faults, latency, counting)."""

from __future__ import annotations

import threading

from torch_tgb.storage._base import ObjectStore

__all__ = ["StoreWrapper"]


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

    def close(self) -> None:
        self.inner.close()
