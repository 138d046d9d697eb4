"""BlockShuffle: a sealed namespace read in block-shuffled epochs, as a step source.

Positions count through the epochs: position ``p = e * N + i`` (``N`` steps in
the sealed namespace) is the ``i``-th TGB of epoch ``e``, whose order is
``transforms.block_shuffle_order(N, block_size, seed, e)``: blocks of
consecutive TGBs in a shuffled block order (ZeroBatch's block shuffle keeps
read-ahead locality inside a block), a new order every epoch. It is a pure
function of (seed, epoch), so every rank computes the same sequence without
talking to anyone.

A ``StepEntry`` it yields has ``step = p`` (the position: what ``Project``, the
cursor and the worker sharding count in, so resume, workers and a new world
size work exactly as on the plain stream) and ``manifest_step`` = the TGB's
step in the manifest. Entries are fetched from the manifest a block at a time.

The namespace must be sealed (checked when the node is built): shuffling a
stream that still grows would change the order under a reader. State: the next position and the version seen
(``state_at`` gives the state of any position).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from torch_tgb.datapipes.read._types import ManifestView, StepEntry
from torch_tgb.errors import ManifestError
from torch_tgb.manifest import ManifestState, TGBEntry
from torch_tgb.transforms import block_shuffle_order

__all__ = ["BlockShuffle"]


class BlockShuffle(BaseNode[StepEntry]):
    """Yields the ``StepEntry`` of positions ``epoch * N`` up to ``(epoch + epochs) * N`` (``epochs=None``: forever)."""

    NEXT_STEP_KEY = "next_step"
    VERSION_KEY = "version"

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
        if block_size < 1 or (epochs is not None and epochs < 1) or epoch < 0 or seed < 0:
            raise ValueError(f"need block_size >= 1, epochs >= 1 or None, epoch >= 0, seed >= 0; got "
                             f"{block_size=} {epochs=} {epoch=} {seed=}")
        self.manifest = manifest
        self.block_size = block_size
        self.seed = seed
        self.first_epoch = epoch
        self.epochs = epochs
        self._head = self._sealed_head(manifest)  # sealed: N and the order never change
        self._next = self.first_epoch * self.num_steps
        self._version = int(self._head.version)
        self._order: tuple[int, np.ndarray] | None = None  # (epoch, order)
        self._entries: dict[int, TGBEntry] = {}

    def state_at(self, step: int, version: int = 0) -> dict[str, int]:
        """The state of this node positioned at ``step`` (a position, see the module docstring)."""
        return {self.NEXT_STEP_KEY: step, self.VERSION_KEY: version}

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self._next = int(initial_state[self.NEXT_STEP_KEY])
            self._version = int(initial_state.get(self.VERSION_KEY, 0))
        else:
            self._next, self._version = self.first_epoch * self.num_steps, int(self._head.version)
        self._order = None
        self._entries.clear()

    def get_state(self) -> dict[str, Any]:
        return self.state_at(self.next_step, self._version)

    @property
    def num_steps(self) -> int:
        """``N``: steps in the sealed namespace (one epoch)."""
        return int(self._head.num_steps)

    @property
    def next_step(self) -> int:
        return self._next

    @property
    def stop_step(self) -> int | None:
        """The position where the stream ends (exclusive), or None (forever)."""
        return None if self.epochs is None else (self.first_epoch + self.epochs) * self.num_steps

    def available(self, limit: int = 64) -> int:
        """Positions this node can hand out without waiting: all of them (the namespace is sealed)."""
        stop = self.stop_step
        return limit if stop is None else max(0, min(limit, stop - self.next_step))

    @staticmethod
    def _sealed_head(manifest: ManifestView) -> ManifestState:
        head = manifest.head()
        if not head.sealed:
            raise ManifestError(
                f"{manifest.url}: a shuffled read needs a sealed namespace; version {head.version} "
                f"({head.num_steps} steps) is not sealed"
            )
        return head

    def next(self) -> StepEntry:
        position, step = self._locate()
        self._next = position + 1
        version = int(self._head.version)
        self._version = max(self._version, version)
        return StepEntry(position, version, self._entries[step], manifest_step=step)

    def next_run(self, limit: int) -> tuple[int, int, list[TGBEntry]]:
        """Up to ``limit`` positions at once whose TGBs are consecutive in the manifest (inside one block).

        ``(first position, version, entries)``, as ``ManifestPoller.next_run``
        gives them: the run path reads a block-shuffled epoch a block at a time.
        """
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        position, step = self._locate()
        assert self._order is not None  # set by _locate
        order = self._order[1]
        index = position % self.num_steps
        count = 1
        stop = self.stop_step
        while (count < limit and index + count < len(order) and int(order[index + count]) == step + count
               and step + count in self._entries and (stop is None or position + count < stop)):
            count += 1
        self._next = position + count
        version = int(self._head.version)
        self._version = max(self._version, version)
        return position, version, [self._entries[s] for s in range(step, step + count)]

    def _locate(self) -> tuple[int, int]:
        """The next position and its TGB's manifest step; loads that TGB's block of entries."""
        n = int(self._head.num_steps)
        position = self.next_step
        stop = self.stop_step
        if n == 0 or (stop is not None and position >= stop):
            raise StopIteration
        epoch, index = divmod(position, n)
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, block_shuffle_order(n, self.block_size, self.seed, epoch))
        step = int(self._order[1][index])
        if step not in self._entries:
            start = step - step % self.block_size
            stop_block = min(start + self.block_size, n)
            self._entries = dict(zip(range(start, stop_block), self.manifest.entries(start, stop_block)))
        return position, step
