"""Shared helpers of the consumer tests: deterministic global batches and a producer run.

With ``TGB_TEST_ROWS=efficient`` in the environment, :func:`produce` writes the
same batches as token-efficient rows (``Layout.labels_from``: the tokens and the
one after them, ``labels`` derived by the reader) instead of storing ``labels``:
``tests/consumer/test_layouts.py`` runs the resume, world-size and epoch
property tests that way too, unchanged, since a reader delivers the same tensors.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from torch_tgb.layout import Layout
from torch_tgb.producer import Producer

GLOBAL_BATCH = 8
SEQ_LEN = 16
LAYOUT = Layout(dp=2, cp=2, seq_keys=("input_ids", "labels"))


def make_batch(offset: int, *, batch: int = GLOBAL_BATCH, seq: int = SEQ_LEN) -> dict[str, torch.Tensor]:
    """Global batch number ``offset``: every value says where it came from."""
    sample = torch.arange(batch, dtype=torch.int64) + offset * 1000
    tokens = sample[:, None] * 1000 + torch.arange(seq, dtype=torch.int64)[None, :]
    return {"input_ids": tokens, "labels": tokens + 1, "sample_id": sample}


def efficient(layout: Layout, batch: dict[str, torch.Tensor]) -> tuple[Layout, dict[str, torch.Tensor]]:
    """``layout`` and ``batch`` as token-efficient rows: ``input_ids`` with its next token, ``labels`` derived."""
    keys = tuple(k for k in layout.seq_keys if k != "labels")
    tokens = torch.cat([batch["input_ids"], batch["labels"][:, -1:]], dim=1)  # labels are input_ids + 1 here
    rest = {k: v for k, v in batch.items() if k not in ("input_ids", "labels")}
    return dataclasses.replace(layout, seq_keys=keys, labels_from="input_ids"), {"input_ids": tokens, **rest}


def produce(ns: Any, n: int, *, layout: Layout = LAYOUT, seal: bool = True, producer_id: str = "p0",
            storage_options: dict | None = None, policy: str = "fixed:4", start: int = 0) -> None:
    rows = os.environ.get("TGB_TEST_ROWS", "stored")
    written = efficient(layout, make_batch(0))[0] if rows == "efficient" else layout
    with Producer(ns, producer_id=producer_id, layout=written, commit_policy=policy,
                  storage_options=storage_options) as p:
        for offset in range(start, start + n):
            batch = make_batch(offset)
            p.append(efficient(layout, batch)[1] if rows == "efficient" else batch, offset=offset)
        p.flush()
        if seal:
            p.close(seal=True)


def global_sequence(n: int, start: int = 0) -> list[dict[str, torch.Tensor]]:
    return [make_batch(o) for o in range(start, start + n)]


def open_reader(ds: Any, store: Any, layout: Layout) -> Any:
    """The last node of the read path ``ds`` (a TGBDataset) would read with from the start: LocalRuns or a RangeReader."""
    from torch_tgb.consumer._keys import KeyPlan
    from torch_tgb.consumer._paths import PathStart, RunPath, open_path
    from torch_tgb.cursor import Cursor
    from torch_tgb.layout import plan_reads
    from torch_tgb.manifest import Manifest

    plan = plan_reads(layout, ds.mesh, dp_split=ds.options.dp_split)
    keys = KeyPlan(None, (), None, False)
    path, _ = open_path(store, Manifest(store), plan, keys, ds.options, None, PathStart(Cursor(0), None, 0, 1))
    return path.runs if isinstance(path, RunPath) else path.reader
