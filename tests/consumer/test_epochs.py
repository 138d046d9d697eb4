"""Readers of a sealed namespace in shuffled epochs: order, agreement across ranks, exact resume, safety."""

from __future__ import annotations

import pytest
import torch

from torch_tgb import DataLoader, Mesh, TGBDataset
from torch_tgb.checkpoint import live_checkpoints, record_watermark
from torch_tgb.cursor import cursor_of
from torch_tgb.errors import LayoutError, ManifestError
from torch_tgb.layout import Layout

from tests.consumer._support import make_batch, produce

N = 12
LAYOUT2 = Layout(dp=2, seq_keys=("input_ids", "labels"))


@pytest.fixture(scope="module")
def sealed(tmp_path_factory) -> str:
    ns = str(tmp_path_factory.mktemp("epochs") / "ns")
    produce(ns, N, layout=LAYOUT2)
    return ns


def offsets(batches: list[dict[str, torch.Tensor]]) -> list[int]:
    """The producer offset (= manifest step here) each delivered batch came from."""
    return [int(b["sample_id"][0]) // 1000 for b in batches]


def reader(ns: str, rank: int, **kw) -> TGBDataset:
    return TGBDataset(ns, mesh=Mesh(rank, 2), prefetch=0, shuffle=True, block_size=3, seed=7, **kw)


def test_two_ranks_three_epochs_each_a_permutation_epochs_differ_ranks_agree(sealed):
    runs = {rank: list(reader(sealed, rank, epochs=3)) for rank in (0, 1)}
    for rank, batches in runs.items():
        assert len(batches) == 3 * N
        seen = offsets(batches)
        epochs = [seen[e * N : (e + 1) * N] for e in range(3)]
        for order in epochs:
            assert sorted(order) == list(range(N))  # every step exactly once per epoch
        assert len({tuple(o) for o in epochs}) == 3  # a new order every epoch
        for b in batches:  # this rank's slice of the step it reports
            full = make_batch(int(b["sample_id"][0]) // 1000)
            half = full["sample_id"].shape[0] // 2
            assert torch.equal(b["sample_id"], full["sample_id"][rank * half : (rank + 1) * half])
    assert offsets(runs[0]) == offsets(runs[1])  # ranks agree on the sequence


def test_block_locality_inside_an_epoch(sealed):
    order = offsets(list(reader(sealed, 0)))
    for s in range(0, N, 3):  # blocks of 3 consecutive steps stay together and in order
        i = order.index(s)
        assert order[i : i + 3] == [s, s + 1, s + 2]


@pytest.mark.parametrize("stop", [0, 1, 5, 12, 13, 30])
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_at_any_point_equals_uninterrupted(sealed, stop, workers):
    full = offsets(list(DataLoader(sealed, mesh=Mesh(0, 2), num_workers=workers, shuffle=True, block_size=3,
                                   seed=7, epochs=3, prefetch=0)))
    first = DataLoader(sealed, mesh=Mesh(0, 2), num_workers=workers, shuffle=True, block_size=3, seed=7, epochs=3,
                       prefetch=0)
    it = iter(first)
    head = [next(it) for _ in range(stop)]
    state = first.state_dict()
    del it
    again = DataLoader(sealed, mesh=Mesh(0, 2), num_workers=workers, shuffle=True, block_size=3, seed=7, epochs=3,
                       prefetch=0)
    again.load_state_dict(state)
    assert offsets(head) + offsets(list(again)) == full


def test_resume_on_another_world_size_at_a_step_boundary(sealed):
    """dp 2 -> 1 (merge): the new reader continues the same shuffled sequence with whole global batches."""
    ds = reader(sealed, 0, epochs=2)
    it = iter(ds)
    seen = offsets([next(it) for _ in range(7)])
    state = ds.state_dict()
    one = TGBDataset(sealed, mesh=Mesh(0, 1), prefetch=0, shuffle=True, block_size=3, seed=7, epochs=2)
    one.load_state_dict(state)
    rest = list(one)
    assert all(b["sample_id"].shape[0] == 8 for b in rest)  # whole global batches now
    assert seen + offsets(rest) == offsets(list(reader(sealed, 0, epochs=2)))


def test_set_epoch_starts_that_epoch(sealed):
    ds = reader(sealed, 0)
    ds.set_epoch(2)
    epoch2 = offsets(list(ds))
    assert offsets(list(reader(sealed, 0, epochs=3)))[2 * N :] == epoch2
    assert list(ds) == []  # one epoch read: iterating again continues past its end
    ds.set_epoch(0)
    assert offsets(list(ds)) == offsets(list(reader(sealed, 0)))


def test_unshuffled_epochs_repeat_the_manifest_order(sealed):
    ds = TGBDataset(sealed, mesh=Mesh(0, 2), prefetch=0, epochs=2)
    assert offsets(list(ds)) == list(range(N)) * 2


def test_watermark_of_a_shuffled_reader_protects_every_step(sealed):
    ds = reader(sealed, 0)
    it = iter(ds)
    for _ in range(9):
        next(it)
    state = ds.state_dict()
    assert cursor_of(state).step == 0  # any step may be read again in a later epoch
    assert state["tgb_epochs"]["cursor"]["step"] == 9
    record_watermark(sealed, checkpoint_id="shuffled", state=state)
    assert [w.step for w in live_checkpoints(sealed) if w.checkpoint_id == "shuffled"] == [0]


def test_shuffle_refuses_an_unsealed_namespace(tmp_path):
    ns = str(tmp_path / "open")
    produce(ns, 3, layout=LAYOUT2, seal=False)
    with pytest.raises(ManifestError, match="not sealed"):
        next(iter(reader(ns, 0)))


def test_resume_with_other_order_settings_is_refused(sealed):
    ds = reader(sealed, 0)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    other = TGBDataset(sealed, mesh=Mesh(0, 2), prefetch=0, shuffle=True, block_size=3, seed=8)
    with pytest.raises(LayoutError, match="seed"):
        other.load_state_dict(state)
    stream = TGBDataset(sealed, mesh=Mesh(0, 2), prefetch=0)
    with pytest.raises(LayoutError, match="epochs"):
        stream.load_state_dict(state)
    with pytest.raises(LayoutError, match="stream"):
        reader(sealed, 0).load_state_dict(stream.state_dict())


def test_set_epoch_on_a_stream_read_changes_nothing(sealed):
    """Frameworks (HF Trainer, accelerate) call set_epoch at every epoch start; a stream has one pass."""
    ds = TGBDataset(sealed, mesh=Mesh(0, 2), prefetch=0)
    ds.set_epoch(0)  # the start of the only pass: silent
    with pytest.warns(UserWarning, match=r"set_epoch\(1\) on a stream read changes nothing"):
        ds.set_epoch(1)
    assert offsets(list(ds)) == list(range(N))
