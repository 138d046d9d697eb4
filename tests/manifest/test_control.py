"""Control records (manifest/control.py): blocks decided once by a conditional create, versions, hostile objects."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import ControlConflict, ManifestError
from torch_tgb.manifest import ControlChannel, Manifest, TGBEntry
from torch_tgb.manifest._entries import EntryTable
from torch_tgb.manifest.control import MIX_CONFIG_KEY, TRAINER_KEY, mix_block_key
from torch_tgb.storage import MemoryStore, open_store


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore(f"control-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def test_a_record_ahead_of_the_producers_lands_at_its_step(store) -> None:
    trainer = ControlChannel(store, block=10)
    record = trainer.set_mix({"web": 0.2, "code": 0.8}, step=37, note="loss-driven")
    assert record.step == 37 and dict(record.weights) == {"web": 0.2, "code": 0.8}
    producer = ControlChannel(store)  # the namespace fixes the block size for everyone
    assert producer.block == 10
    assert producer.read_block(2, claimant="p0") is None  # steps 20..29: nothing, and now nothing can land there
    got = producer.read_block(3, claimant="p0")
    assert got is not None and got.step == 37 and got.note == "loss-driven"
    assert trainer.mix_records() == [(1, got)]


def test_a_claimed_block_sends_the_record_to_the_first_free_block(store) -> None:
    channel = ControlChannel(store, block=4)
    for b in range(6):  # the producers have reached step 23
        assert channel.read_block(b, claimant="p0") is None
    with pytest.raises(ControlConflict, match="already holds a claim"):
        channel.set_mix({"a": 1.0}, step=5, later=False)
    record = channel.set_mix({"a": 1.0}, step=5)
    assert record.step == 24  # the first step of the first block no producer entered
    assert channel.read_block(6, claimant="p1") == record
    # a record written far ahead leaves a hole; a later late record still lands after the producers
    far = channel.set_mix({"a": 2.0}, step=100)
    assert far.step == 100
    nxt = channel.set_mix({"a": 3.0}, step=1)
    assert nxt.step == 28 and [v for v, _ in channel.mix_records()] == [1, 2, 3]
    assert [r.step for _, r in channel.mix_records()] == [24, 28, 100]


def test_the_block_size_is_fixed_once(store) -> None:
    assert ControlChannel(store, block=8).block == 8
    with pytest.raises(ManifestError, match="control block is 8"):
        _ = ControlChannel(store, block=16).block
    assert ControlChannel(store).block == 8


def test_set_mix_refuses_bad_weights_and_unknown_sources(store) -> None:
    channel = ControlChannel(store)
    for weights in ({}, {"a": -1.0}, {"a": float("nan")}, {"a": 0.0}, {"": 1.0}):
        with pytest.raises(ManifestError):
            channel.set_mix(weights, step=0)
    with pytest.raises(ManifestError, match=r"\['cod'\]"):
        channel.set_mix({"web": 1.0, "cod": 1.0}, step=0, sources=["web", "code"])
    with pytest.raises(ValueError):
        channel.set_mix({"a": 1.0}, step=-1)
    assert not store.list("_tgb/control/mix/")  # nothing written


@pytest.mark.parametrize("content, match", [
    ({"format": "tgb-control/1", "block": 16, "step": 3, "weights": {"a": 1.0}}, "outside its block"),
    ({"format": "tgb-control/1", "block": 32, "step": 20, "weights": {"a": 1.0}}, "names block 32"),
    ({"format": "tgb-control/1", "block": 16, "step": 20, "weights": {"a": "x"}}, "finite number"),
    ({"format": "other", "block": 16, "claimed_by": "p"}, "not a control record"),
    ({"format": "tgb-control/1", "block": 16, "step": 20, "weights": {"a": 1.0}, "run": "me"}, "unknown field"),
])
def test_a_hostile_block_object_is_refused_by_name(store, content, match) -> None:
    channel = ControlChannel(store, block=16)
    store.put(mix_block_key(16), json.dumps(content).encode())
    with pytest.raises(ManifestError, match=match) as info:
        channel.read_block(1, claimant="p0")
    assert mix_block_key(16) in str(info.value)


def test_trainer_status_round_trip(store) -> None:
    channel = ControlChannel(store)
    assert channel.trainer_status() is None
    channel.report_trainer(step=120, stall=0.07, extra={"loss": 2.5})
    status = channel.trainer_status()
    assert status is not None and (status.step, status.stall, dict(status.extra)) == (120, 0.07, {"loss": 2.5})
    with pytest.raises(ValueError):
        channel.report_trainer(step=1, stall=1.5)
    assert store.exists(TRAINER_KEY) and store.exists(MIX_CONFIG_KEY) is False  # status needs no block size


def test_a_channel_pickles_by_url_not_by_store(tmp_path) -> None:
    import pickle

    channel = ControlChannel(str(tmp_path / "ns"), block=4)
    channel.set_mix({"a": 1.0}, step=2)
    clone = pickle.loads(pickle.dumps(channel))
    assert clone.read_block(0, claimant="x") is not None
    with pytest.raises(TypeError, match="URL"):
        pickle.dumps(ControlChannel(MemoryStore("control-pickle")))


# --- the entries' control column (format 1 and format 2) ------------------------------------------


def _entry(i: int, control: int) -> TGBEntry:
    return TGBEntry(f"data/p0/e000001-o{i:012d}-x.tgb", 4096, 100, 200, "p0", i, 4, 64, control=control)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=20))
def test_control_column_round_trips_in_both_formats(controls) -> None:
    entries = [_entry(i, c) for i, c in enumerate(controls)]
    table = EntryTable.of(entries)
    columns = table.to_json()
    assert ("control" in columns) == any(controls)  # versions without control records read as before
    assert list(EntryTable.from_json(json.loads(json.dumps(columns)), what="v")) == entries
    assert [TGBEntry.from_json(e.to_json(), what="v") for e in entries] == entries
    assert list(table.column("control")) == controls


def test_a_negative_control_is_refused() -> None:
    columns = EntryTable.of([_entry(0, 1)]).to_json()
    columns["control"] = [-1]
    with pytest.raises(ManifestError, match="negative"):
        EntryTable.from_json(columns, what="v")


def test_producer_records_the_control_version(tmp_path) -> None:
    import torch

    from torch_tgb.layout import Layout
    from torch_tgb.producer import Producer

    ns = str(tmp_path / "ns")
    with Producer(ns, producer_id="p0", layout=Layout(dp=1), commit_policy="fixed:2") as p:
        for offset, control in enumerate([0, 0, 1, 2]):
            p.append({"x": torch.full((2, 3), offset)}, offset=offset, control=control)
        with pytest.raises(ValueError, match="control"):
            p.append({"x": torch.zeros(2, 3)}, control=-1)
    with open_store(ns) as store:
        assert [e.control for e in Manifest(store).entries(0, 4)] == [0, 0, 1, 2]
