"""A remote reader takes a segment's footers from its index: about one request per step, cold.

Also: segments written without an index (older writers) read footer by
footer, an index longer than the first tail read costs one more read, and a
corrupt index is refused naming the object.
"""

from __future__ import annotations

import uuid

import pytest
import torch

import torch_tgb.datapipes.read.footer_index as footer_index
import torch_tgb.producer._segment as segment_module
from torch_tgb.consumer import TGBDataset
from torch_tgb.errors import CorruptObject
from torch_tgb.layout import Layout, Mesh
from torch_tgb.manifest import Manifest
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import MemoryStore

STEPS = 48
SEGMENT = 16


def batch(offset: int) -> dict[str, torch.Tensor]:
    return {"ids": torch.arange(4 * 32, dtype=torch.int32).reshape(4, 32) + 1000 * offset}


def produce(segment_tgbs: int = SEGMENT) -> MemoryStore:
    store = MemoryStore(f"seg-{uuid.uuid4().hex}")
    with Producer(store, producer_id="p", layout=Layout(dp=2), commit_policy="fixed:8",
                  config=ProducerConfig(segment_tgbs=segment_tgbs)) as p:
        for offset in range(STEPS):
            p.append(batch(offset), offset=offset)
        p.close(seal=True)
    return store


def read(store: MemoryStore) -> tuple[list[torch.Tensor], TGBDataset]:
    ds = TGBDataset(store, mesh=Mesh(1, 2), prefetch=2)
    return [b["ids"] for b in ds], ds


def expected() -> list[torch.Tensor]:
    return [batch(o)["ids"][2:] for o in range(STEPS)]


def test_a_cold_remote_read_of_segments_costs_about_one_request_per_step() -> None:
    got, ds = read(produce())
    assert len(got) == STEPS and all(torch.equal(a, b) for a, b in zip(got, expected()))
    s = ds.stats()
    segments = STEPS // SEGMENT
    assert s.footer_requests == segments  # one tail read per segment object
    assert s.data_requests == STEPS
    assert s.requests_per_step == pytest.approx((STEPS + segments) / STEPS) and s.requests_per_step <= 1.07


def test_segments_without_an_index_read_footer_by_footer(monkeypatch) -> None:
    monkeypatch.setattr(segment_module, "segment_index", lambda tgbs, footers: b"")
    got, ds = read(produce())
    assert all(torch.equal(a, b) for a, b in zip(got, expected()))
    s = ds.stats()
    assert s.footer_requests == STEPS // SEGMENT + STEPS  # the tail read finds a TGB trailer, then one per footer


def test_an_index_longer_than_the_tail_read_costs_one_more_read(monkeypatch) -> None:
    monkeypatch.setattr(footer_index, "_TAIL_READ", 64)
    got, ds = read(produce())
    assert all(torch.equal(a, b) for a, b in zip(got, expected()))
    assert ds.stats().footer_requests == 2 * (STEPS // SEGMENT)


def test_a_corrupt_index_is_refused_naming_the_object() -> None:
    store = produce()
    entry = Manifest(store).entries(0, 1)[0]
    data = bytearray(store.get(entry.key))
    data[entry.total_size - 40] ^= 0x10  # inside the index, before its trailer
    store.put(entry.key, bytes(data))
    with pytest.raises(CorruptObject, match=entry.key):
        read(store)
