"""The small task the framework examples share: a sealed synthetic regression stream and its model.

Each global batch has 8 rows cut for dp=2; ``sample_id`` = step * 1000 + row
says where each row came from, so a logged batch maps back to its step and
slice. Not part of torch_tgb.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

import torch_tgb as tgb

GLOBAL_BATCH = 8
FEATURES = 16


def write_namespace(ns: str, num_steps: int) -> None:
    """``num_steps`` global batches of ``x`` (features), ``y = x.sum(1)`` and ``sample_id``, sealed."""
    with tgb.Producer(ns, producer_id="p0", layout=tgb.Layout(dp=2)) as p:
        for step in range(p.resume_offset, num_steps):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(GLOBAL_BATCH, FEATURES, generator=g)
            p.append({"x": x, "y": x.sum(1, keepdim=True), "sample_id": torch.arange(GLOBAL_BATCH) + step * 1000},
                     offset=step)
        p.close(seal=True)


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def log_batch(workdir: str | Path, rank: int, global_step: int, batch: dict[str, torch.Tensor]) -> None:
    """Append ``{"global_step", "step", "samples"}`` to ``workdir/batches-rank<rank>.jsonl``."""
    ids = batch["sample_id"].tolist()
    with open(Path(workdir) / f"batches-rank{rank}.jsonl", "a") as f:
        f.write(json.dumps({"global_step": global_step, "step": ids[0] // 1000, "samples": ids}) + "\n")


def example_parser(doc: str | None, *, steps_help: str) -> argparse.ArgumentParser:
    """The arguments every framework example takes (it adds its own checkpoint and resume flags)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", required=True)
    p.add_argument("--ns", default=None, help="namespace (default WORKDIR/ns, written once if missing)")
    p.add_argument("--num-steps", type=int, default=40, help="global batches written to a new namespace")
    p.add_argument("--steps", type=int, default=16, help=steps_help)
    p.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (a preemption)")
    p.add_argument("--log-batches", action="store_true", help="log every batch to WORKDIR/batches-rankR.jsonl")
    return p


class StepCount:
    """A step counter the framework checkpoints with the model (``state_dict``/``load_state_dict``)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])


#: the last barrier's work of :func:`barrier_then_destroy`, freed at interpreter exit
_LAST_BARRIER: list[Any] = []


def barrier_then_destroy() -> None:
    """Wait for every rank, then destroy the default process group, without gloo's teardown hang.

    A plain ``dist.barrier(); dist.destroy_process_group()`` can hang a rank
    on a busy machine (seen here about once in ten runs with the cores
    loaded): gloo's worker thread drops the barrier's work after the caller
    has returned, and that drop needs the GIL (the work holds Python
    thread-local state), while the main thread, holding the GIL, joins the
    same worker in ``~ProcessGroupGloo`` as the last owner of the group (a
    DDP model's reducer) is freed. Holding the barrier's work to the end
    means the worker never frees it; the group is destroyed first, the
    training objects after.
    """
    import torch.distributed as dist

    work = dist.barrier(async_op=True)
    assert work is not None
    work.wait()
    _LAST_BARRIER.append(work)
    dist.destroy_process_group()
