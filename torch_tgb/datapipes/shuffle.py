"""BlockShuffle: random access over a sealed namespace, in block-shuffled order.

The order is ``offline.block_shuffle_order(num_steps, block_size, seed,
epoch)``: blocks of consecutive TGBs in a shuffled block order (ZeroBatch's
block shuffle keeps read-ahead locality inside a block), a new order every
epoch. Every rank computes the same order without talking to anyone. Entries
are fetched from the manifest a block at a time.

The namespace must be sealed: shuffling a stream that still grows would
change the order under a reader. State: ``(epoch, index)`` of the next item.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from torch_tgb.datapipes._types import ManifestView, StepEntry
from torch_tgb.errors import ManifestError
from torch_tgb.manifest import ManifestState, TGBEntry
from torch_tgb.transforms import block_shuffle_order

__all__ = ["BlockShuffle"]


class BlockShuffle(BaseNode[StepEntry]):
    """Yields ``StepEntry`` of a sealed namespace in block-shuffled order, ``epochs`` times."""

    EPOCH_KEY = "epoch"
    INDEX_KEY = "index"

    def __init__(
        self,
        manifest: ManifestView,
        *,
        block_size: int = 64,
        seed: int = 0,
        epoch: int = 0,
        epochs: int | None = 1,
    ) -> None:
        super().__init__()
        if block_size < 1 or (epochs is not None and epochs < 1):
            raise ValueError(f"block_size and epochs must be >= 1, got {block_size=} {epochs=}")
        self.manifest = manifest
        self.block_size = block_size
        self.seed = seed
        self.first_epoch = epoch
        self.epochs = epochs
        self._epoch = epoch
        self._index = 0
        self._head: ManifestState | None = None
        self._order: np.ndarray | None = None
        self._entries: dict[int, TGBEntry] = {}

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self._epoch = int(initial_state[self.EPOCH_KEY])
            self._index = int(initial_state[self.INDEX_KEY])
        else:
            self._epoch, self._index = self.first_epoch, 0
        self._order = None
        self._entries.clear()

    def get_state(self) -> dict[str, Any]:
        return {self.EPOCH_KEY: self._epoch, self.INDEX_KEY: self._index}

    def _sealed_head(self) -> ManifestState:
        if self._head is None:
            head = self.manifest.head()
            if not head.sealed:
                raise ManifestError(
                    f"{self.manifest.url}: BlockShuffle needs a sealed namespace; version {head.version} "
                    f"({head.num_steps} steps) is not sealed"
                )
            self._head = head
        return self._head

    def next(self) -> StepEntry:
        head = self._sealed_head()
        n = int(head.num_steps)
        if self._index >= n:
            if self.epochs is not None and self._epoch + 1 >= self.first_epoch + self.epochs:
                raise StopIteration
            self._epoch, self._index, self._order = self._epoch + 1, 0, None
            self._entries.clear()
        if n == 0:
            raise StopIteration
        if self._order is None:
            self._order = block_shuffle_order(n, self.block_size, self.seed, self._epoch)
        step = int(self._order[self._index])
        if step not in self._entries:
            start = step - step % self.block_size
            stop = min(start + self.block_size, n)
            self._entries = dict(zip(range(start, stop), self.manifest.entries(start, stop)))
        self._index += 1
        return StepEntry(step, int(head.version), self._entries[step])
