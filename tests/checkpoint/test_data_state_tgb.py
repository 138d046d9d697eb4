"""DataState round trips through dcp.save/dcp.load with the real consumers.

TGBDataset, tgb.DataLoader (with and without a worker) and a plain
StatefulDataLoader over a TGBDataset: after loading, the next batches equal
those the saved object delivered after the save.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torchdata.stateful_dataloader import StatefulDataLoader

import torch_tgb as tgb
from torch_tgb.checkpoint import DataState, record_watermark, safe_boundary
from torch_tgb.layout import Layout, Mesh

STEPS = 14
MESH = Mesh(dp_rank=1, dp_size=2)


@pytest.fixture(scope="module")
def ns(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ds") / "ns")
    with tgb.Producer(path, producer_id="p0", layout=Layout(dp=2), commit_policy="fixed:3") as p:
        for offset in range(STEPS):
            p.append({"x": torch.arange(8).reshape(4, 2) + 100 * offset})
        p.close(seal=True)
    return path


def make(kind: str, ns: str):
    if kind == "dataset":
        return tgb.TGBDataset(ns, mesh=MESH)
    if kind == "loader":
        return tgb.DataLoader(ns, mesh=MESH)
    if kind == "loader-worker":
        return tgb.DataLoader(ns, mesh=MESH, num_workers=1)
    return StatefulDataLoader(tgb.TGBDataset(ns, mesh=MESH), batch_size=None)


@pytest.mark.parametrize("kind", ["dataset", "loader", "loader-worker", "stateful-dataloader"])
def test_dcp_round_trip_resumes_exactly(ns, kind, tmp_path):
    source = make(kind, ns)
    it = iter(source)
    before = [next(it)["x"] for _ in range(5)]
    assert before[0][0, 0] == 4  # rank 1 of 2 reads rows 2..3 of step 0
    dcp.save({"data": DataState(source)}, checkpoint_id=str(tmp_path / "ck"))
    record_watermark(ns, f"ck-{kind}", source.state_dict())
    after = [b["x"] for b in it]
    assert len(after) == STEPS - 5

    target = make(kind, ns)
    dcp.load({"data": DataState(target)}, checkpoint_id=str(tmp_path / "ck"))
    replay = [b["x"] for b in target]
    assert len(replay) == len(after) and all(torch.equal(a, b) for a, b in zip(after, replay))
    assert safe_boundary(ns) == 5


@pytest.mark.parametrize("new_dp", [1, 4])
def test_world_size_change_resumes_from_rank0_state(ns, new_dp, tmp_path):
    """Saved by a dp=2 job (ranks 0 and 1), loaded by a dp=new_dp job with DataState(rank=0)."""
    for rank in range(2):
        source = tgb.DataLoader(ns, mesh=Mesh(dp_rank=rank, dp_size=2))
        it = iter(source)
        for _ in range(6):
            next(it)
        dcp.save({"data": DataState(source, rank=rank)}, checkpoint_id=str(tmp_path / f"ck{rank}"))
    # one checkpoint directory per rank stands in for one multi-rank checkpoint: rank 0's is loaded
    resumed = []
    for rank in range(new_dp):
        target = tgb.DataLoader(ns, mesh=Mesh(dp_rank=rank, dp_size=new_dp))
        dcp.load({"data": DataState(target, rank=0)}, checkpoint_id=str(tmp_path / "ck0"))
        resumed.append([b["x"] for b in target])
    # every TGB from step 6 on is delivered once, in order, split over the new ranks
    # dp=1 reads one whole TGB per step; dp=4 reads two TGBs per step (a half of one each)
    steps = len(resumed[0])
    assert steps == {1: STEPS - 6, 4: (STEPS - 6) // 2}[new_dp]
    assert all(len(r) == steps for r in resumed)
    delivered = torch.cat([torch.cat([resumed[r][s] for r in range(new_dp)]) for s in range(steps)])
    expected = torch.cat([torch.arange(8).reshape(4, 2) + 100 * offset for offset in range(6, STEPS)])
    assert torch.equal(delivered, expected)


@pytest.mark.parametrize("workers", [0, 1])
def test_dcp_shared_key_carries_a_shuffled_epochs_position(ns, tmp_path, workers):
    """The rank-independent ``cursor`` key holds the epochs position too, not only ``tgb_cursor`` (step 0 there)."""
    settings = dict(shuffle=True, block_size=2, seed=3, epochs=2)
    source = tgb.DataLoader(ns, mesh=MESH, num_workers=workers, **settings)
    it = iter(source)
    for _ in range(STEPS + 3):  # into the second epoch
        next(it)
    assert source.step == STEPS + 3
    dcp.save({"data": DataState(source)}, checkpoint_id=str(tmp_path / "ck"))
    after = [b["x"] for b in it]
    target = tgb.DataLoader(ns, mesh=Mesh(dp_rank=0, dp_size=1), num_workers=workers, **settings)  # new world size
    dcp.load({"data": DataState(target)}, checkpoint_id=str(tmp_path / "ck"))
    assert target.step == STEPS + 3
    replay = [b["x"] for b in target]
    assert len(replay) == len(after) == STEPS - 3
    for mine, theirs in zip(after, replay):  # the same TGBs in the same order; dp=1 reads both halves
        assert torch.equal(mine, theirs[2:])
