"""A small resumable node for the ``produce`` tests, counting what it reads."""

from __future__ import annotations

from typing import Any

import torch
from torchdata.nodes import BaseNode


class CountingNode(BaseNode[dict[str, torch.Tensor]]):
    """Global batch ``i`` = 4 rows filled with ``i``; ``total`` batches; counts every batch read."""

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total
        self.reads: list[int] = []
        self.resets: list[dict[str, Any] | None] = []
        self._next = 0

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.resets.append(initial_state)
        self._next = 0 if initial_state is None else int(initial_state["next"])

    def next(self) -> dict[str, torch.Tensor]:
        if self._next >= self.total:
            raise StopIteration
        i = self._next
        self.reads.append(i)
        self._next += 1
        return {"input_ids": torch.full((4, 8), i, dtype=torch.int32)}

    def get_state(self) -> dict[str, Any]:
        return {"next": self._next}
