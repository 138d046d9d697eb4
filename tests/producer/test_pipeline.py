"""``tgb.produce`` and ``Producer.append(state=)``: pipeline state committed with offsets, restored on restart."""

from __future__ import annotations

import json
import uuid

import pytest
import torch

import torch_tgb as tgb
from tests.producer._pipeline_nodes import CountingNode
from torch_tgb.errors import TGBError
from torch_tgb.format import read_footer, read_slice
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.records import MAX_STATE_BYTES, ManifestState, ProducerState, Version
from torch_tgb.producer import Producer, ProducerConfig, ProduceReport, produce
from torch_tgb.storage import MemoryStore, ObjectStore

LAYOUT = Layout(dp=2, seq_keys=("input_ids",))


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore(f"pipeline-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def committed(store: ObjectStore, pid: str = "p0") -> list[int]:
    m = Manifest(store)
    return [int(e.offset) for e in m.entries(0, m.head().num_steps) if e.producer == pid]


def batch_values(store: ObjectStore) -> list[int]:
    """The fill value of every committed batch, in step order (read back from the objects)."""
    m = Manifest(store)
    values = []
    for e in m.entries(0, m.head().num_steps):
        footer = read_footer(store, e.key, size=e.size, footer_offset=e.footer_offset, footer_length=e.footer_length)
        part = read_slice(store, e.key, footer, footer.slice(0, 0))
        values.append(int(part["input_ids"].flatten()[0]))
    return values


def test_state_committed_with_offset_and_restored(store) -> None:
    node = CountingNode(total=10)
    report = produce(store, node, producer_id="p0", layout=LAYOUT, commit_policy="fixed:2", max_steps=4)
    assert isinstance(report, ProduceReport)
    assert (report.start_offset, report.end_offset, report.batches, report.resumed) == (0, 4, 4, False)
    assert not report.exhausted and not report.sealed
    head = Manifest(store).head()
    assert head.producers["p0"].next_offset == 4
    assert head.producers["p0"].state == {"next": 4}
    with Producer(store, producer_id="p0", layout=LAYOUT) as p:
        assert (p.resume_offset, p.resume_state) == (4, {"next": 4})

    again = CountingNode(total=10)
    report = produce(store, again, producer_id="p0", layout=LAYOUT, commit_policy="fixed:3")
    assert (report.start_offset, report.end_offset, report.resumed, report.exhausted) == (4, 10, True, True)
    assert again.resets == [{"next": 4}]
    assert again.reads == list(range(4, 10))  # nothing re-read from the start
    assert committed(store) == list(range(10))
    assert batch_values(store) == list(range(10))
    assert Manifest(store).head().producers["p0"].state == {"next": 10}


def test_max_steps_counts_offsets_of_the_producer_id_not_of_the_run(store) -> None:
    produce(store, CountingNode(total=10), producer_id="p0", layout=LAYOUT, max_steps=3)
    node = CountingNode(total=10)
    report = produce(store, node, producer_id="p0", layout=LAYOUT, max_steps=3)
    assert (report.start_offset, report.end_offset, report.batches) == (3, 3, 0)
    assert node.reads == [] and node.resets == []  # nothing to do: the pipeline is not even reset
    report = produce(store, node, producer_id="p0", layout=LAYOUT, max_steps=5)
    assert (report.start_offset, report.end_offset) == (3, 5)
    assert node.reads == [3, 4]
    assert committed(store) == [0, 1, 2, 3, 4]


def test_fresh_producer_resets_to_none_and_seals(store) -> None:
    node = CountingNode(total=3)
    report = produce(store, node, producer_id="p0", layout=LAYOUT, seal=True)
    assert node.resets == [None]
    assert report.exhausted and report.sealed
    head = Manifest(store).head()
    assert head.sealed
    assert head.producers["p0"].state == {"next": 3}  # the seal-only version keeps the state


def test_crash_before_commit_reproduces_only_uncommitted_offsets(store) -> None:
    def crash(offset: int) -> None:
        if offset == 6:
            raise RuntimeError("injected crash")

    node = CountingNode(total=9)
    with pytest.raises(RuntimeError, match="injected"):
        produce(store, node, producer_id="p0", layout=LAYOUT, commit_policy="fixed:4", on_append=crash)
    done = len(committed(store))
    assert done <= 7  # whatever was still pending when it died is lost (invisible orphans)
    again = CountingNode(total=9)
    produce(store, again, producer_id="p0", layout=LAYOUT, commit_policy="fixed:4")
    assert again.reads == list(range(done, 9))
    assert committed(store) == list(range(9))
    assert batch_values(store) == list(range(9))


def test_state_survives_epoch_bumps_and_snapshots(store) -> None:
    config = ProducerConfig(snapshot_every=2)
    produce(store, CountingNode(total=5), producer_id="p0", layout=LAYOUT, commit_policy="naive", config=config)
    for _ in range(3):  # epoch bumps write versions that do not append
        with Producer(store, producer_id="p0", layout=LAYOUT, config=config) as p:
            assert p.resume_state == {"next": 5}
    head = Manifest(store, snapshot_every=2).head()
    assert head.producers["p0"].epoch == 4 and head.producers["p0"].state == {"next": 5}
    snapshots = [k for k in store.list("_tgb/snapshots/")]
    assert snapshots
    raw = store.get(sorted(snapshots)[-1])
    assert b"next" not in raw  # format 2: a snapshot names the producers' table, never a pipeline state
    newest = ManifestState.decode(raw, what="snapshot")
    assert Manifest(store).read_snapshot(newest.version).producers["p0"].state == {"next": 5}


def test_append_state_is_checked_and_copied(store) -> None:
    with Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        assert p.resume_state is None  # a fresh producer id
        with pytest.raises(ValueError, match=r"producer 'p0' offset=0: state is .* over the limit"):
            p.append({"input_ids": torch.zeros(4, 8, dtype=torch.int32)}, offset=0,
                     state={"blob": "x" * MAX_STATE_BYTES})
        with pytest.raises(ValueError, match=r"producer 'p0' offset=0: state is not JSON"):
            p.append({"input_ids": torch.zeros(4, 8, dtype=torch.int32)}, offset=0, state={"t": torch.zeros(1)})
        with pytest.raises(ValueError, match="must be a JSON object"):
            p.append({"input_ids": torch.zeros(4, 8, dtype=torch.int32)}, offset=0, state=[1, 2])  # type: ignore[arg-type]
        state = {"pos": (1, 2), "nested": {"k": [1.5]}}
        assert p.append({"input_ids": torch.zeros(4, 8, dtype=torch.int32)}, offset=0, state=state)
        state["pos"] = (9, 9)  # mutating after append changes nothing committed
        p.flush()
    assert Manifest(store).head().producers["p0"].state == {"nested": {"k": [1.5]}, "pos": [1, 2]}


def test_append_without_state_clears_it(store) -> None:
    with Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        p.append({"input_ids": torch.zeros(4, 8, dtype=torch.int32)}, offset=0, state={"a": 1})
        p.flush()
        p.append({"input_ids": torch.zeros(4, 8, dtype=torch.int32)}, offset=1)
    with Producer(store, producer_id="p0", layout=LAYOUT) as p:
        assert (p.resume_offset, p.resume_state) == (2, None)
    with pytest.raises(TGBError, match=r"producer 'p0' committed offsets 0\.\.1 without a pipeline state"):
        produce(store, CountingNode(total=5), producer_id="p0", layout=LAYOUT)


def test_records_without_state_still_parse() -> None:
    old = {"epoch": 2, "next_offset": 7, "committed_at": 1.0}
    assert ProducerState.from_json(old, what="t") == ProducerState(2, 7, 1.0, None)
    assert "state" not in ProducerState(2, 7, 1.0).to_json()
    with_state = ProducerState(2, 7, 1.0, {"a": [1]})
    assert ProducerState.from_json(json.loads(json.dumps(with_state.to_json())), what="t") == with_state
    version = Version(1, "ab" * 8, 0, (), {"p": ProducerState(1, 0, 0.0)}, False, 0.0)
    assert Version.decode(version.encode(), number=1).producers["p"].state is None


def test_produce_rejects_a_plain_iterator(store) -> None:
    with pytest.raises(TypeError, match="BaseNode"):
        produce(store, iter([]), producer_id="p0", layout=LAYOUT)  # type: ignore[arg-type]


def test_top_level_export() -> None:
    assert tgb.produce is produce
