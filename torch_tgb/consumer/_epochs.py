"""Epochs over a sealed namespace: the read order's settings and where a reader stands in it.

A reader in epochs mode (``shuffle=True``, or ``epochs`` other than 1) reads
positions ``p = e * N + i`` of ``datapipes.BlockShuffle`` (epoch ``e``, the
``i``-th TGB of that epoch's order; ``N`` steps in the namespace). Its state
keeps two cursors apart:

- ``"tgb_cursor"`` is ``Cursor(0)``: a reader of shuffled epochs may still need
  any TGB of the namespace, so the watermark of its checkpoint protects every
  step (the Reclaimer deletes nothing it could read again) -- safe by construction;
- ``"tgb_epochs"`` holds the position ``p`` (a ``Cursor`` in position units) and
  the settings that define the order. Resuming with other order settings would
  silently read another sequence, so it is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch_tgb.cursor import Cursor
from torch_tgb.errors import LayoutError

__all__ = ["EPOCHS_KEY", "EpochOrder"]

#: key of the epochs-mode position in a reader's state
EPOCHS_KEY = "tgb_epochs"

#: block size of an unshuffled epochs read: one block, so every epoch is in manifest order
SEQUENTIAL_BLOCK = 2**62


@dataclass(frozen=True)
class EpochOrder:
    """How a sealed namespace is read in epochs: the order (shuffle, block_size, seed) and how many."""

    shuffle: bool
    block_size: int
    seed: int
    epochs: int | None
    first_epoch: int = 0

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.seed < 0 or self.first_epoch < 0 or (self.epochs is not None and self.epochs < 1):
            raise ValueError(
                f"need block_size >= 1, seed >= 0, epoch >= 0 and epochs >= 1 or None; got {self.block_size=} "
                f"{self.seed=} {self.first_epoch=} {self.epochs=}"
            )

    def starting_at(self, first_epoch: int) -> EpochOrder:
        """The same order, read from the beginning of ``first_epoch``."""
        return dataclasses.replace(self, first_epoch=first_epoch)

    @property
    def order_block(self) -> int:
        """The block size the order is computed with (one block: no shuffle)."""
        return self.block_size if self.shuffle else SEQUENTIAL_BLOCK

    def to_json(self, cursor: Cursor, num_steps: int) -> dict[str, Any]:
        return {
            "cursor": cursor.to_json(),
            "shuffle": self.shuffle,
            "block_size": self.block_size,
            "seed": self.seed,
            "epochs": self.epochs,
            "first_epoch": self.first_epoch,
            "num_steps": num_steps,
        }

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any]) -> EpochOrder:
        """The order a saved epochs position (:meth:`to_json`) was taken under, from its first epoch."""
        try:
            epochs = saved.get("epochs")
            return cls(bool(saved["shuffle"]), int(saved["block_size"]), int(saved["seed"]),
                       None if epochs is None else int(epochs), int(saved.get("first_epoch", 0)))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed {EPOCHS_KEY} state {dict(saved)!r:.300}: {e}") from e

    def check_same_order(self, saved: Mapping[str, Any]) -> None:
        """Refuse a saved position taken under another order: it would name other TGBs."""
        mine = {"shuffle": self.shuffle, "block_size": self.block_size, "seed": self.seed}
        theirs = {k: saved.get(k) for k in mine}
        if mine != theirs:
            raise LayoutError(
                f"the state was taken reading epochs with {theirs}, this reader uses {mine}: the positions "
                "would name other TGBs; resume with the same shuffle, block_size and seed"
            )
