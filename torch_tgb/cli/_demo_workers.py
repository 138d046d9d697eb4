"""Processes of ``tgb demo``: one consumer rank reading its slice, started with spawn.

Each worker writes its measured results as JSON into the demo directory (no
pickled return values crossing processes). Slices are summarised by a hash of
their token bytes, so the parent can prove every produced batch reached each
rank exactly once across the restart.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["consume", "slice_digest"]


def slice_digest(input_ids: torch.Tensor | np.ndarray) -> str:
    """A short hash of one rank's ``input_ids`` slice (shape and bytes)."""
    import numpy as np

    array = np.ascontiguousarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids)
    h = hashlib.blake2b(digest_size=12)
    h.update(str((array.dtype.str, array.shape)).encode())
    h.update(array.tobytes())
    return h.hexdigest()


def consume(
    ns: str,
    rank: int,
    world: int,
    steps: int,
    state_in: str | None,
    state_out: str,
    result_out: str,
    timeout: float,
    compute_s: float = 0.0,
) -> None:
    """Read ``steps`` steps as dp rank ``rank`` of ``world``, from ``state_in`` if given.

    Saves the dataset state (the checkpoint) to ``state_out`` and the measured
    figures to ``result_out``. ``compute_s`` stands in for the training step
    each batch would feed (a sleep): input stall is the time spent waiting for
    data as a share of the whole loop.
    """
    import dataclasses

    import torch_tgb as tgb

    started = time.perf_counter()
    dataset = tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=world), timeout=timeout)
    if state_in is not None:
        dataset.load_state_dict(json.loads(Path(state_in).read_text()))
    digests: list[str] = []
    tokens = 0
    wait = 0.0
    iterator = iter(dataset)
    loop_started = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:  # the stream was sealed before `steps` steps
            break
        wait += time.perf_counter() - t0
        digests.append(slice_digest(batch["input_ids"]))
        tokens += int(batch["input_ids"].numel())
        if compute_s > 0:
            time.sleep(compute_s)
    loop_seconds = time.perf_counter() - loop_started
    state = dataset.state_dict()
    Path(state_out).write_text(json.dumps(state, sort_keys=True))
    stats: dict[str, Any] = {}
    if callable(getattr(dataset, "stats", None)):
        snapshot = dataset.stats()
        stats = (
            dataclasses.asdict(snapshot)
            if dataclasses.is_dataclass(snapshot) and not isinstance(snapshot, type)
            else dict(snapshot)
        )
    close = getattr(dataset, "close", None)
    if callable(close):
        close()
    result = {
        "rank": rank,
        "steps": len(digests),
        "tokens": tokens,
        "digests": digests,
        "wait_s": wait,
        "loop_s": loop_seconds,
        "process_s": time.perf_counter() - started,
        "stats": stats,
    }
    Path(result_out).write_text(json.dumps(result, sort_keys=True))
