"""Read a whole sealed namespace back as global batches, through the reader (one rank reads everything)."""

from __future__ import annotations

import pytest
import torch

from torch_tgb.consumer import TGBDataset
from torch_tgb.layout import Layout, Mesh
from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store

#: what a reader derives from token rows, so tests see the per-token arrays of either row format
DERIVED = ("labels", "document_ids", "position_ids")


def read_global_batches(ns: str) -> tuple[list[dict[str, torch.Tensor]], Layout, bool]:
    """Every committed step of ``ns`` as the full global batch, plus the layout and the sealed flag."""
    with open_store(ns) as store:
        manifest = Manifest(store)
        head = manifest.head()
        info = manifest.dataset()
        layout = Layout.from_json(info.layout)
    # token rows derive them; other namespaces store them, or have none (a reader refuses what it cannot derive)
    derive = DERIVED if "seq_lens" in info.schema else ()
    # up to the steps committed now, sealed or not (a reader would wait at the end of an unsealed stream)
    out = list(TGBDataset(ns, mesh=Mesh(0, 1, 0, 1), prefetch=0, derive=derive, stop_step=head.num_steps))
    return out, layout, head.sealed


@pytest.fixture
def read_back():
    return read_global_batches
