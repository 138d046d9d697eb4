"""DataState through torch.distributed.checkpoint (single process; torchrun tests are in test_resume_torchrun)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful
from torchdata.stateful_dataloader import StatefulDataLoader

from torch_tgb.checkpoint import DataState
from torch_tgb.checkpoint.data_state import decode_state, encode_state
from torch_tgb.errors import CorruptObject


class Counter(torch.utils.data.IterableDataset):
    """A stand-in stateful dataset whose state has a tgb_cursor, tuples and int keys."""

    def __init__(self, n: int = 50) -> None:
        self.n, self.i = n, 0

    def __iter__(self):
        while self.i < self.n:
            self.i += 1
            yield torch.tensor([self.i])

    def state_dict(self):
        return {"tgb_cursor": {"step": self.i, "version": 1}, "shape": (2, 3), "by_int": {1: "a"}}

    def load_state_dict(self, sd):
        assert sd["shape"] == (2, 3) and sd["by_int"] == {1: "a"}  # test double: round-trip exactness
        self.i = sd["tgb_cursor"]["step"]


def test_is_stateful():
    assert isinstance(DataState(Counter()), Stateful)


def test_codec_round_trip_keeps_tuples_and_int_keys():
    value = {"a": (1, [2, (3,)]), "b": {0: None, "x": 1.5}, "c": {"__tgb_tuple__": 1}}
    assert decode_state(encode_state(value, capacity=1024)) == value


def test_codec_rejects_overflow_and_garbage():
    with pytest.raises(ValueError, match="capacity"):
        encode_state({"x": "y" * 100}, capacity=64)
    with pytest.raises(TypeError, match="JSON"):
        encode_state({"x": object()})
    with pytest.raises(CorruptObject, match="header"):
        decode_state(torch.zeros(64, dtype=torch.uint8))
    with pytest.raises(CorruptObject):
        decode_state(torch.zeros(64, dtype=torch.int64))


def test_dcp_save_load_restores_stateful_dataloader(tmp_path):
    loader = StatefulDataLoader(Counter(), batch_size=None, num_workers=0)
    it = iter(loader)
    seen = [int(next(it)) for _ in range(7)]
    model = torch.nn.Linear(2, 2)
    dcp.save({"model": model.state_dict(), "data": DataState(loader)}, checkpoint_id=str(tmp_path / "ck"))
    expected = [int(next(it)) for _ in range(5)]

    fresh = StatefulDataLoader(Counter(), batch_size=None, num_workers=0)
    dcp.load({"model": torch.nn.Linear(2, 2).state_dict(), "data": DataState(fresh)},
             checkpoint_id=str(tmp_path / "ck"))
    assert seen == list(range(1, 8))
    assert [int(b) for b, _ in zip(fresh, range(5))] == expected


def test_dcp_keys_are_per_rank(tmp_path):
    ds = Counter()
    state = DataState(ds, rank=3)
    assert list(state.state_dict()) == ["rank_3"]
    dcp.save({"data": state}, checkpoint_id=str(tmp_path / "ck"))
    md = dcp.FileSystemReader(str(tmp_path / "ck")).read_metadata()
    assert "data.rank_3" in md.state_dict_metadata
    with pytest.raises(BaseException) as info:  # DCP wraps it in CheckpointException (a BaseException)
        dcp.load({"data": DataState(Counter(), rank=0)}, checkpoint_id=str(tmp_path / "ck"))
    assert "data.rank_0" in str(info.value)


def test_rank_override_loads_another_ranks_state(tmp_path):
    """After a world-size change, a new rank loads an existing rank's cursor with rank=..."""
    ds = Counter()
    it = iter(ds)
    for _ in range(4):
        next(it)
    dcp.save({"data": DataState(ds, rank=1)}, checkpoint_id=str(tmp_path / "ck"))
    fresh = Counter()
    dcp.load({"data": DataState(fresh, rank=1)}, checkpoint_id=str(tmp_path / "ck"))
    assert fresh.i == 4


def test_rank_and_world_are_resolved_as_a_readers_mesh_resolves_them(monkeypatch):
    """Without ``rank=`` and without a process group, the state is keyed by the launcher's RANK, as a reader's
    Mesh takes it (``layout.resolve_rank_world``): the reader of rank 2 saves under ``rank_2``, not ``rank_0``."""
    from torch_tgb.checkpoint.data_state import decode_state

    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    state = DataState(Counter()).state_dict()
    assert list(state) == ["rank_2"]
    payload = decode_state(state["rank_2"])
    assert payload["rank"] == 2 and payload["world_size"] == 4
