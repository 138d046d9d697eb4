"""Steering: where a ``Mix`` stands in its namespace's control records (``manifest/control.py``).

The Mix asks :meth:`Steering.at` for the weights in force at its step before
each draw. Entering a new control block, it reads (or claims) the block's
object first, so a record applies at exactly its step, the same in every run:
records are met in block order and a block's content is fixed once read.

State (JSON, under the Mix's ``"control"`` key): the next block to read, the
version in force (records met and applied, 1, 2, ...; 0: none yet), its
weights, and a record read but not yet in force (its step lies ahead inside
the block just read). Nothing else: the channel is re-opened from its
namespace, so a restored Mix reads on exactly where the saved one stood.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch_tgb.manifest.control import ControlChannel, MixRecord

__all__ = ["Steering", "mix_of"]


def mix_of(node: object) -> Any:
    """The ``Mix`` under ``node`` (itself, or forwarded by the stages above it: ``mix``), else ``None``."""
    return getattr(node, "mix", None)


class Steering:
    """The control records a Mix has met, and the weights they put in force."""

    NEXT_BLOCK_KEY = "next_block"
    VERSION_KEY = "version"
    WEIGHTS_KEY = "weights"
    PENDING_KEY = "pending"

    def __init__(self, channel: ControlChannel, *, claimant: str) -> None:
        self.channel = channel
        self.claimant = claimant
        self._block: int | None = None
        self.reset(None)

    def reset(self, state: Mapping[str, Any] | None) -> None:
        if state is None:
            self.next_block = 0
            self.version = 0
            self.weights: dict[str, float] | None = None
            self.pending: MixRecord | None = None
            return
        self.next_block = int(state[self.NEXT_BLOCK_KEY])
        self.version = int(state[self.VERSION_KEY])
        weights = state.get(self.WEIGHTS_KEY)
        self.weights = None if weights is None else {str(k): float(v) for k, v in weights.items()}
        pending = state.get(self.PENDING_KEY)
        self.pending = None if pending is None else MixRecord(int(pending["step"]), dict(pending["weights"]))

    def state(self) -> dict[str, Any]:
        pending = None if self.pending is None else {"step": self.pending.step, "weights": dict(self.pending.weights)}
        return {self.NEXT_BLOCK_KEY: self.next_block, self.VERSION_KEY: self.version,
                self.WEIGHTS_KEY: None if self.weights is None else dict(self.weights), self.PENDING_KEY: pending}

    @property
    def block(self) -> int:
        if self._block is None:
            self._block = self.channel.block
        return self._block

    def at(self, step: int) -> dict[str, float] | None:
        """The weights of the newest record in force at ``step`` (``None``: none yet), reading blocks up to it."""
        while step >= self.next_block * self.block:
            record = self.channel.read_block(self.next_block, claimant=self.claimant)
            self.next_block += 1
            if record is not None:
                self._apply(step)  # an earlier pending record is due: its step lies in an earlier block
                self.pending = record
        self._apply(step)
        return self.weights

    def _apply(self, step: int) -> None:
        if self.pending is not None and step >= self.pending.step:
            self.weights, self.pending = dict(self.pending.weights), None
            self.version += 1
