"""Segment objects: several TGBs per object read exactly like one TGB per object.

Properties: any segment size x any layout x any reader mesh/remap reads the
same tensors as a one-TGB-per-object namespace; a producer restarted with an
unwritten or uncommitted segment resumes exactly once; a reader resumed in the
middle of a segment continues exactly; old entries (no ``start``) parse.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from torch_tgb.consumer import TGBDataset
from torch_tgb.errors import LayoutError, ManifestError, StorageFull, TGBError
from torch_tgb.layout import Layout, Mesh, plan_reads
from torch_tgb.manifest import Manifest, TGBEntry
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import FaultyStore, MemoryStore, open_store


def _batch(offset: int, rows: int = 8, seq: int = 8) -> dict[str, torch.Tensor]:
    ids = torch.arange(rows * seq, dtype=torch.int32).reshape(rows, seq) + offset * 10_000
    return {"input_ids": ids, "w": torch.full((rows,), float(offset))}


def _write(store, steps: int, layout: Layout, config: ProducerConfig, policy: str = "fixed:3") -> None:
    with Producer(store, producer_id="p", layout=layout, commit_policy=policy, config=config) as p:
        for offset in range(steps):
            p.append(_batch(offset), offset=offset)
        p.close(seal=True)


def _read(store, mesh: Mesh, dp_split: str) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in b.items()} for b in TGBDataset(store, mesh=mesh, prefetch=2, dp_split=dp_split)]


def _same(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _mem() -> MemoryStore:
    return MemoryStore(f"seg-{uuid.uuid4().hex}")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.integers(1, 9),
    segment_tgbs=st.integers(1, 5),
    segment_kb=st.sampled_from([1, 8, 64, 1 << 20]),
    layout_dp=st.sampled_from([1, 2, 4]),
    reader=st.sampled_from([(0, 1, "merge"), (1, 2, "merge"), (3, 8, "merge"), (1, 2, "spread"), (0, 4, "spread")]),
    local=st.booleans(),
)
def test_any_segment_size_reads_what_one_tgb_objects_read(
    tmp_path_factory, steps, segment_tgbs, segment_kb, layout_dp, reader, local
) -> None:
    rank, world, dp_split = reader
    layout = Layout(dp=layout_dp)
    try:
        plan = plan_reads(layout, Mesh(rank, world), dp_split=dp_split)
    except LayoutError:
        assume(False)  # a remap this layout cannot serve
    assume(plan.tgbs_per_step <= steps)
    if local:
        root = tmp_path_factory.mktemp("seg")
        one, seg = str(root / "one"), str(root / "seg")
    else:
        one, seg = _mem(), _mem()
    _write(one, steps, layout, ProducerConfig())
    _write(seg, steps, layout, ProducerConfig(segment_tgbs=segment_tgbs, segment_bytes=segment_kb << 10))
    mesh = Mesh(rank, world)
    _same(_read(seg, mesh, dp_split), _read(one, mesh, dp_split))
    entries = Manifest(open_store(seg)).entries(0, steps)
    keys = {e.key for e in entries}
    assert len(keys) <= steps and (segment_tgbs > 1 or len(keys) == steps)


def test_segment_objects_hold_several_tgbs(tmp_path) -> None:
    store = _mem()
    _write(store, 7, Layout(dp=2), ProducerConfig(segment_tgbs=3))
    entries = Manifest(store).entries(0, 7)
    assert [e.key for e in entries].count(entries[0].key) == 3
    assert len({e.key for e in entries}) == 3  # 3 + 3 + 1
    first = entries[0]
    assert first.start == 0 and first.object_size == store.size(first.key)
    assert entries[1].start % 64 == 0 and entries[1].start >= first.size  # format 3: TGBs on 64 bytes (small slices)
    assert entries[6].object_size is None and entries[6].total_size == store.size(entries[6].key)  # a lone TGB


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_entries_become_visible_only_with_their_written_segment(tmp_path, kind: str) -> None:
    store = _mem() if kind == "memory" else open_store(str(tmp_path / "ns"))  # local: written in place
    p = Producer(store, producer_id="p", layout=Layout(dp=1), commit_policy="fixed:1",
                 config=ProducerConfig(segment_tgbs=4))
    for offset in range(3):
        p.append(_batch(offset), offset=offset)
    assert store.list("data/") == [] and Manifest(store).head().num_steps == 0  # the segment is still open
    p.flush()
    assert len(store.list("data/")) == 1 and Manifest(store).head().num_steps == 3
    p.close()


def test_restart_mid_segment_resumes_exactly_once() -> None:
    store = _mem()
    config = ProducerConfig(segment_tgbs=4)
    p = Producer(store, producer_id="p", layout=Layout(dp=2), commit_policy="fixed:1", config=config)
    for offset in range(6):  # segment [0..3] written and committed, [4, 5] still open
        p.append(_batch(offset), offset=offset)
    p._segments.settle()  # the full segment's background write is done
    p._loop.flush()  # commit what was written, as a crash after the commit would leave it
    p.abort()  # dies with an open segment: offsets 4, 5 were never written
    assert Manifest(store).head().producers["p"].next_offset == 4
    p2 = Producer(store, producer_id="p", layout=Layout(dp=2), commit_policy="fixed:1", config=config)
    assert p2.resume_offset == 4
    for offset in range(10):
        p2.append(_batch(offset), offset=offset)  # 0..3 skipped: already committed
    p2.close(seal=True)
    one = _mem()
    _write(one, 10, Layout(dp=2), ProducerConfig())
    _same(_read(store, Mesh(1, 2), "merge"), _read(one, Mesh(1, 2), "merge"))


def test_written_but_uncommitted_segment_is_an_orphan_and_is_rewritten() -> None:
    store = _mem()
    config = ProducerConfig(segment_tgbs=3)
    p = Producer(store, producer_id="p", layout=Layout(dp=1), commit_policy="fixed:100", config=config)
    for offset in range(3):
        p.append(_batch(offset), offset=offset)  # segment written at the third TGB, not committed
    p._segments.settle()
    orphan = store.list("data/")
    assert len(orphan) == 1
    p.abort()
    p2 = Producer(store, producer_id="p", layout=Layout(dp=1), commit_policy="fixed:100", config=config)
    assert p2.resume_offset == 0
    for offset in range(3):
        p2.append(_batch(offset), offset=offset)
    p2.close(seal=True)
    named = {e.key for e in Manifest(store).entries(0, 3)}
    assert orphan[0] not in named and len(named) == 1  # rewritten under a new epoch's key


@pytest.mark.parametrize("write_behind", [True, False])
def test_a_lost_segment_stops_the_producer_and_a_restart_resumes_exactly(write_behind: bool) -> None:
    """A segment whose write failed took its TGBs with it: no later append may leave a gap behind them."""
    store = FaultyStore(_mem())
    config = ProducerConfig(segment_tgbs=2, write_behind=write_behind)
    p = Producer(store, producer_id="p", layout=Layout(dp=1), commit_policy="fixed:1", config=config)
    store.fail_next("put", 1, "enospc")
    with pytest.raises(StorageFull):
        for offset in range(4):  # the first segment [0, 1] fails (at once, or at the next append)
            p.append(_batch(offset), offset=offset)
    with pytest.raises(TGBError, match="lost a segment"):
        p.append(_batch(p._next_offset), offset=p._next_offset)
    with pytest.raises(TGBError, match="lost a segment"):
        p.flush()
    p.abort()
    assert Manifest(store).head().num_steps == 0
    _write(store, 5, Layout(dp=1), config)
    one = _mem()
    _write(one, 5, Layout(dp=1), ProducerConfig())
    _same(_read(store, Mesh(0, 1), "merge"), _read(one, Mesh(0, 1), "merge"))


@pytest.mark.parametrize("stop_at", [1, 2, 4])
def test_reader_resume_mid_segment_is_exact(tmp_path, stop_at: int) -> None:
    ns = str(tmp_path / "ns")
    _write(ns, 7, Layout(dp=2), ProducerConfig(segment_tgbs=5))
    full = _read(ns, Mesh(0, 2), "merge")
    ds = TGBDataset(ns, mesh=Mesh(0, 2), prefetch=2)
    it = iter(ds)
    head = [{k: v.clone() for k, v in next(it).items()} for _ in range(stop_at)]
    state = json.loads(json.dumps(ds.state_dict()))
    del it
    resumed = TGBDataset(ns, mesh=Mesh(0, 2), prefetch=2)
    resumed.load_state_dict(state)
    _same(head + _read_from(resumed), full)


def _read_from(ds: TGBDataset) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in b.items()} for b in ds]


def test_old_entries_parse_and_new_ones_round_trip() -> None:
    old = {"key": "data/p/a.tgb", "size": 8192, "footer_offset": 4096, "footer_length": 100,
           "producer": "p", "offset": 0, "samples": 2, "tokens": 3}
    entry = TGBEntry.from_json(old, what="v1")
    assert entry.start == 0 and entry.object_size is None and entry.total_size == 8192
    assert entry.to_json() == old  # one-TGB entries are written exactly as before
    seg = TGBEntry("data/p/s.tgb", 16384, 12288, 100, "p", 1, start=8192, object_size=20480)
    assert TGBEntry.from_json(json.loads(json.dumps(seg.to_json())), what="v2") == seg
    with pytest.raises(ManifestError, match="does not fit"):
        TGBEntry.from_json({**old, "start": 5000}, what="v3")  # starts after its own footer
    with pytest.raises(ManifestError, match="does not fit"):
        TGBEntry.from_json({**old, "object_size": 100}, what="v4")


def test_bulk_writers_default_to_segments(tmp_path) -> None:
    from torch_tgb.offline import write_dataset

    ns = str(tmp_path / "wd")
    docs = [list(range(1, 40))] * 12
    write_dataset(ns, docs, layout=Layout(dp=2), global_batch_size=4, seq_len=16)
    data = [f for _, _, fs in os.walk(os.path.join(ns, "data")) for f in fs]
    assert len(data) == 1 and Manifest(open_store(ns)).head().num_steps > 1


def test_pipeline_state_is_committed_with_its_segment() -> None:
    store = _mem()
    config = ProducerConfig(segment_tgbs=3)
    p = Producer(store, producer_id="p", layout=Layout(dp=1), commit_policy="fixed:1", config=config)
    for offset in range(5):  # segment [0..2] written and committed; [3, 4] open when the producer dies
        p.append(_batch(offset), offset=offset, state={"next": offset + 1})
    p._segments.settle()
    p._loop.flush()
    p.abort()
    p2 = Producer(store, producer_id="p", layout=Layout(dp=1), commit_policy="fixed:1", config=config)
    assert p2.resume_offset == 3 and p2.resume_state == {"next": 3}  # the state of the last committed offset
    p2.close()
