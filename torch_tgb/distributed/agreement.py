"""Ranks agree, step by step, on which steps they skip (``ReaderOptions(on_corrupt="skip_step")``).

A rank that cannot read its slice of a step (corrupt, missing) cannot be the
only one to skip it: the others would train that step while it trains the
next, and the job's steps would drift apart. So with ``skip_step`` and an
initialised process group of more than one rank, every rank all-gathers
``(step, verdict)`` for every step it is about to hand out (verdict 0: read
fine, 1: this rank skips it, 2: this rank's stream ended) and every rank
skips a step that any rank skips. The step numbers must agree too (a
disagreement is a :class:`~torch_tgb.errors.ConsistencyError`, as with
``check_consistency``). One all-gather of two int64 per step; nothing
without a process group (a single process agrees with itself).

Markers in the namespace (``manifest/skips.py``) carry the decision across
restarts; this carries it across the ranks of a running job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from torch_tgb.errors import ConsistencyError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["END", "OK", "SKIP", "StepAgreement"]

OK, SKIP, END = 0, 1, 2


class StepAgreement:
    """The ranks' common verdict on each step (see the module docstring)."""

    def __init__(self, *, group: ProcessGroup | None = None, namespace: str = "") -> None:
        self.group = group
        self.namespace = namespace

    @staticmethod
    def active() -> bool:
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1

    def verdict(self, step: int, mine: int) -> int:
        """The common verdict on ``step`` given this rank's: SKIP if any rank skips, END if every rank ended."""
        if not self.active():
            return mine
        import torch.distributed as dist

        world = dist.get_world_size(self.group)
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(self.group) == "nccl" \
            else torch.device("cpu")
        local = torch.tensor([step if mine != END else -1, mine], dtype=torch.int64, device=device)
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local, group=self.group)
        rows = [tuple(int(x) for x in t.tolist()) for t in gathered]
        verdicts = {v for _, v in rows}
        if verdicts == {END}:
            return END
        if END in verdicts or len({s for s, _ in rows}) != 1:
            described = ", ".join(f"rank {r}: " + ("end" if v == END else f"step={s}") for r, (s, v) in enumerate(rows))
            raise ConsistencyError(f"{self.namespace}: ranks disagree on the step sequence while agreeing on "
                                   f"skipped steps (on_corrupt='skip_step'): {described}")
        return SKIP if SKIP in verdicts else OK
