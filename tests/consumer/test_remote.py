"""The remote read path (no local file to map): an in-memory namespace, S3 (moto), GCS (fake-gcs-server), Azure (Azurite)."""

from __future__ import annotations

import uuid

import pytest
import torch

from tests.consumer._support import LAYOUT, make_batch, produce
from torch_tgb.consumer import DataLoader, TGBDataset, cursor_of
from torch_tgb.layout import Mesh


def check_stream(batches: list[dict], mesh: Mesh, start: int, n: int) -> None:
    assert len(batches) == n - start
    for step, batch in enumerate(batches, start):
        want = LAYOUT.cut(make_batch(step))[mesh.dp_rank * LAYOUT.cp + mesh.cp_rank].tensors
        assert all(torch.equal(batch[k], want[k]) for k in want)


@pytest.mark.parametrize("prefetch", [0, 3])
def test_memory_namespace_reads_and_resumes(prefetch: int) -> None:
    ns = f"memory://consumer-{uuid.uuid4().hex[:8]}"
    produce(ns, 5)
    mesh = Mesh(1, 2, 1, 2)
    ds = TGBDataset(ns, mesh=mesh, prefetch=prefetch)
    it = iter(ds)
    head = [next(it), next(it)]
    state = ds.state_dict()
    check_stream(head, mesh, 0, 2)
    again = TGBDataset(ns, mesh=mesh, prefetch=prefetch)
    again.load_state_dict(state)
    check_stream(list(again), mesh, 2, 5)
    stats = again.stats()
    assert stats.data_requests == 3 and stats.read_amplification >= 1.0
    assert stats.fetch_p95_s >= stats.fetch_p50_s > 0


def test_cloud_namespace(cloud_namespace) -> None:
    url, options = cloud_namespace
    produce(url, 4, storage_options=options)
    mesh = Mesh(0, 2, 1, 2)
    check_stream(list(TGBDataset(url, mesh=mesh, storage_options=options, prefetch=2)), mesh, 0, 4)
    loader = DataLoader(url, mesh=mesh, storage_options=options, num_workers=0)
    it = iter(loader)
    next(it)
    assert cursor_of(loader.state_dict()).step == 1
