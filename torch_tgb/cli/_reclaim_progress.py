"""The store ``tgb reclaim`` hands its Reclaimer: it moves the bar by every object deleted."""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import TYPE_CHECKING

from torch_tgb.storage import ForwardingStore

if TYPE_CHECKING:
    from torch_tgb._progress import ProgressBar
    from torch_tgb.storage import ObjectStore

__all__ = ["CountingDeletes"]


class CountingDeletes(ForwardingStore):
    """The namespace's store, advancing the bar by every object deleted; its total is what ``data/`` holds."""

    def __init__(self, inner: ObjectStore, bar: ProgressBar[object]) -> None:
        super().__init__(inner)
        self._bar = bar

    def list(self, prefix: str = "") -> builtins.list[str]:
        keys = self.inner.list(prefix)
        if prefix == "data/":  # the Reclaimer's first listing: no pass deletes more data objects than these
            self._bar.total = len(keys) + self._bar.n
            self._bar.refresh()
        return keys

    def delete(self, keys: str | Iterable[str]) -> None:
        batch = [keys] if isinstance(keys, str) else list(keys)
        self.inner.delete(batch)
        self._bar.update(len(batch))
