"""Cross-rank consistency check: every rank must be at the same step and TGB(s).

Each step, every rank all-gathers a small int64 record ``(step, sub_step,
sub_steps, hash of the TGB keys)`` and compares. A disagreement means the
ranks saw different step sequences (a broken manifest view, a misconfigured
cursor) and training must stop before gradients mix data of different steps.
The end of a rank's stream is gathered too, so a rank that ran out while the
others still got a step is caught instead of leaving them blocked.

Without an initialised ``torch.distributed`` process group this is a no-op.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

from torch_tgb.cursor import Cursor
from torch_tgb.errors import ConsistencyError

__all__ = ["ConsistencyChecker", "keys_digest"]

_END = -1


def keys_digest(keys: Sequence[str]) -> int:
    """A 63-bit digest of the TGB keys of one step (identical on every rank)."""
    h = hashlib.sha256("\0".join(keys).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


class ConsistencyChecker:
    """All-gathers ``(step, TGB keys)`` per step over ``group`` and fails on disagreement."""

    def __init__(self, *, group: ProcessGroup | None = None, namespace: str = "") -> None:
        self.group = group
        self.namespace = namespace
        self.checked = 0

    @staticmethod
    def active() -> bool:
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized()

    def check(self, cursor: Cursor, keys: Sequence[str]) -> None:
        """Raise ConsistencyError unless all ranks are at ``cursor`` with the same ``keys``."""
        self.check_digest(cursor, keys_digest(keys), keys=keys)

    def check_digest(self, cursor: Cursor, digest: int, *, keys: Sequence[str] = ()) -> None:
        """Like :meth:`check`, with the keys already reduced by :func:`keys_digest`."""
        record = [cursor.step, cursor.sub_step, cursor.sub_steps, digest]
        what = f"step={cursor.step} sub_step={cursor.sub_step}/{cursor.sub_steps} tgb#{digest:016x}"
        self._compare(record, what + (f" keys={list(keys)}" if keys else ""))

    def check_end(self) -> None:
        """Called when this rank's stream ended: every rank must end at the same point."""
        self._compare([_END, 0, 1, 0], "end of stream")

    def _compare(self, record: list[int], mine: str) -> None:
        if not self.active():
            return
        import torch.distributed as dist

        world = dist.get_world_size(self.group)
        local = torch.tensor(record, dtype=torch.int64)
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local, group=self.group)
        rows = [tuple(int(x) for x in t.tolist()) for t in gathered]
        self.checked += 1
        if any(row != rows[0] for row in rows):
            me = dist.get_rank(self.group)
            described = ", ".join(
                f"rank {r}: " + ("end" if row[0] == _END else f"step={row[0]} sub={row[1]}/{row[2]} tgb#{row[3]:016x}")
                for r, row in enumerate(rows)
            )
            raise ConsistencyError(
                f"{self.namespace}: ranks disagree on the step sequence (check #{self.checked}); "
                f"this is rank {me} at {mine}; all ranks: {described}"
            )
