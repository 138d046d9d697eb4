"""Read a whole sealed namespace back as global batches (format + layout only, no consumer)."""

from __future__ import annotations

import pytest
import torch

from torch_tgb.format import SliceReader, read_footer
from torch_tgb.layout import Layout, Mesh, plan_reads
from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store


def read_global_batches(ns: str) -> tuple[list[dict[str, torch.Tensor]], Layout, bool]:
    """Every committed step of ``ns`` as the full global batch, plus the layout and the sealed flag."""
    store = open_store(ns)
    manifest = Manifest(store)
    head = manifest.head()
    layout = Layout.from_json(manifest.dataset().layout)
    plan = plan_reads(layout, Mesh(0, 1, 0, 1))  # one rank reads everything, merged
    reader = SliceReader(store)
    out = []
    for entry in manifest.entries(0, head.num_steps):
        footer = read_footer(store, entry.key, size=entry.size, footer_offset=entry.footer_offset, footer_length=entry.footer_length)
        # the Producer may not pass its layout to write_tgb yet; when recorded it must agree
        assert footer.layout in (None, layout.to_json())
        reads = plan.reads(0)
        out.append(reads.assemble([reader.read(entry.key, footer, footer.slice(p.dp, p.cp)) for p in reads.pieces]))
    return out, layout, head.sealed


@pytest.fixture
def read_back():
    return read_global_batches
