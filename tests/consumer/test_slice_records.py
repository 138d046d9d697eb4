"""A rank of a large dp x cp grid reads its own slice records, not the whole footer (format version 3).

O(1) footer bytes per rank-step whatever dp * cp, every record checked alone (its CRC binds it to its
place), the same tensors as a whole-footer read, and a corrupt record failing its own step only.
"""

from __future__ import annotations

import struct

import pytest
import torch

from torch_tgb import Layout, Mesh, Producer, TGBDataset
from torch_tgb.errors import CorruptObject
from torch_tgb.manifest import Manifest
from torch_tgb.storage import ForwardingStore, LocalStore
from torch_tgb.testing.counting import CountingStore

DP, CP = 128, 2  # a footer of 256 slices: far over the 4 KiB read whole
LAYOUT = Layout(dp=DP, cp=CP, seq_keys=("ids",))
STEPS = 6


class Remote(ForwardingStore):
    """A local namespace read as a remote one: every read is a range read."""

    def local_path(self, key: str) -> str | None:
        return None


def batch(step: int) -> dict[str, torch.Tensor]:
    return {"ids": torch.arange(DP * 8, dtype=torch.int32).reshape(DP, 8) + 1000 * step,
            "w": torch.full((DP, 3), float(step))}


@pytest.fixture
def namespace(tmp_path) -> str:
    ns = str(tmp_path / "ns")
    with Producer(ns, producer_id="p", layout=LAYOUT, commit_policy="naive") as p:
        for step in range(STEPS):
            p.append(batch(step), offset=step)
        p.close(seal=True)
    return ns


def expected(step: int, dp: int, cp: int) -> dict[str, torch.Tensor]:
    return LAYOUT.cut(batch(step))[dp * CP + cp].tensors


@pytest.mark.parametrize("rank", [(0, 0), (77, 1), (DP - 1, 1)])
def test_a_rank_reads_its_records_and_gets_its_slice(namespace, rank) -> None:
    counting = CountingStore(Remote(LocalStore(namespace)))
    ds = TGBDataset(counting, mesh=Mesh(rank[0], DP, rank[1], CP), prefetch=0)
    for step, got in enumerate(ds):
        for name, tensor in expected(step, *rank).items():
            assert torch.equal(got[name], tensor), (step, name)
    assert step == STEPS - 1
    entry = Manifest(LocalStore(namespace)).entry(0)
    assert entry.slice_record > 0 and entry.footer_length > 8 * 4096
    data = counting.report()["by_class"]["data"]
    payload = sum(t.numel() * t.element_size() for t in expected(0, *rank).values())
    footer_per_step = (data["bytes"] - STEPS * payload) / STEPS
    assert footer_per_step <= 4096, footer_per_step  # a record a step, and the meta once
    assert data["requests"] <= 2 * STEPS + 1


def _record_at(namespace: str, step: int, index: int) -> tuple[str, int, int]:
    entry = Manifest(LocalStore(namespace)).entry(step)
    start = entry.footer_offset + 32 + index * entry.slice_record
    return entry.key, start, entry.slice_record


def test_a_corrupt_record_fails_its_own_step_only(namespace) -> None:
    rank = (5, 1)
    key, start, width = _record_at(namespace, 3, rank[0] * CP + rank[1])
    path = f"{namespace}/{key}"
    with open(path, "r+b") as f:
        f.seek(start + 40)  # inside the record's first tensor row
        byte = f.read(1)
        f.seek(start + 40)
        f.write(bytes([byte[0] ^ 0x10]))
    it = iter(TGBDataset(Remote(LocalStore(namespace)), mesh=Mesh(rank[0], DP, rank[1], CP), prefetch=0))
    for step in range(3):
        assert torch.equal(next(it)["ids"], expected(step, *rank)["ids"])
    with pytest.raises(CorruptObject, match=r"step=3.*slice record.*CRC32C"):
        next(it)


def test_a_record_copied_from_another_tgb_is_refused(namespace) -> None:
    """Every TGB's record of a slice has the same width and shapes: only the CRC's binding tells them apart."""
    rank = (9, 0)
    index = rank[0] * CP + rank[1]
    key2, start2, width = _record_at(namespace, 2, index)
    key4, start4, _ = _record_at(namespace, 4, index)
    with open(f"{namespace}/{key4}", "rb") as f:
        f.seek(start4)
        foreign = f.read(width)
    with open(f"{namespace}/{key2}", "r+b") as f:
        f.seek(start2)
        f.write(foreign)
    it = iter(TGBDataset(Remote(LocalStore(namespace)), mesh=Mesh(rank[0], DP, rank[1], CP), prefetch=0))
    for _ in range(2):
        next(it)
    with pytest.raises(CorruptObject, match=r"step=2.*slice record .*CRC32C mismatch \(corrupted, or not this TGB's\)"):
        next(it)


def test_a_merged_read_of_several_slices_reads_their_records(namespace) -> None:
    """Fewer dp ranks than written: a rank merges k slices, reading k records a step (not the footer)."""
    counting = CountingStore(Remote(LocalStore(namespace)))
    ds = TGBDataset(counting, mesh=Mesh(3, DP // 4, 0, 1), prefetch=0)
    for step, got in enumerate(ds):
        parts = [LAYOUT.cut(batch(step))[d * CP + c].tensors for d in range(12, 16) for c in range(CP)]
        want = torch.cat([torch.cat([parts[2 * i]["ids"], parts[2 * i + 1]["ids"]], dim=1) for i in range(4)])
        assert torch.equal(got["ids"], want), step
    footer_bytes = counting.report()["by_class"]["data"]["bytes"] / STEPS
    assert footer_bytes < 8 * 4096  # 8 records of ~170 B and the slices' bytes: nothing like the ~40 KB footer


def test_an_older_object_in_the_namespace_is_read_whole(namespace) -> None:
    """An entry without a record width (written before version 3) reads its footer whole, as before."""
    from torch_tgb.format import write_tgb

    obj = write_tgb(LocalStore(namespace), "data/p/legacy.tgb", LAYOUT.cut(batch(0)), layout=LAYOUT, format_version=2)
    assert obj.slice_record == 0
    assert struct.unpack("<I", (LocalStore(namespace).get("data/p/legacy.tgb"))[-12:-8])[0] == 1  # no ragged key
