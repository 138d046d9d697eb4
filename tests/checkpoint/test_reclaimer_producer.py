"""Reclaimer next to a real Producer: pending (written, uncommitted) objects are never orphans."""

from __future__ import annotations

import uuid

import torch

import torch_tgb as tgb
from torch_tgb.checkpoint import Reclaimer, record_watermark
from torch_tgb.layout import Layout, Mesh
from torch_tgb.storage import MemoryStore


def test_uncommitted_objects_survive_until_committed():
    store = MemoryStore(f"pend-{uuid.uuid4().hex}")
    try:
        producer = tgb.Producer(store, producer_id="p0", layout=Layout(dp=1), commit_policy="fixed:1000")
        for offset in range(6):
            producer.append({"x": torch.full((2, 2), offset)})
        assert producer.stats().pending == 6 and len(store.list("data/")) == 6  # written, not committed
        record_watermark(store, "ck", {"tgb_cursor": {"step": 0}})
        report = Reclaimer(store).run_once()  # default grace period: far longer than this commit delay
        assert report.orphans == 0 and len(store.list("data/")) == 6
        producer.close(seal=True)  # commits the pending entries
        batches = list(tgb.TGBDataset(store, mesh=Mesh(dp_rank=0, dp_size=1)))
        assert [int(b["x"][0, 0]) for b in batches] == list(range(6))
    finally:
        store.destroy()
