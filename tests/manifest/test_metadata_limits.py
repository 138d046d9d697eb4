"""Writers never write a metadata object that readers refuse: a namespace nobody could open again.

Found by trying a job of many shards, each committing a pipeline state: the
snapshot holding all their states outgrew the 8 MiB a reader accepts, and
every later open failed. The same held for a version of a very large
segment's entries, for oversized metadata in ``dataset.json`` and for a
pipeline state nested deeper than a version can hold.
"""

from __future__ import annotations

import json
import uuid

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tgb as tgb
from torch_tgb.checkpoint import Reclaimer, record_watermark
from torch_tgb.errors import ManifestError
from torch_tgb.manifest import Manifest, ManifestState, ProducerState
from torch_tgb.manifest import _reads, _snapshot_parts
from torch_tgb.manifest._json import load_json
from torch_tgb.manifest.jobs import JobSpec
from torch_tgb.manifest.keys import FLAT, SNAPSHOT_PREFIX, SPREAD_PREFIXES, KeyLayout, snapshot_key, snapshot_part_key
from torch_tgb.manifest._checks import MAX_STATE_DEPTH
from torch_tgb.manifest.records import MAX_VERSION_ENTRIES
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import LocalStore, MemoryStore

from tests._key_layouts import create_namespace

LAYOUT = tgb.Layout(dp=1, seq_keys=("input_ids",))
BATCH = {"input_ids": torch.zeros(1, 4, dtype=torch.int16)}


def _state(states: list[int], version: int = 7) -> ManifestState:
    producers = {f"p{i:04d}": ProducerState(1, i + 1, 1.5, {"pos": "x" * n} if n else None, "done" if i % 2 else "open")
                 for i, n in enumerate(states)}
    return ManifestState(version, len(states), False, producers, JobSpec.sharded("job", max(1, len(states))))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 900), max_size=40), st.integers(200, 3000), st.integers(300, 2000))
def test_split_snapshot_round_trips_and_bounds_each_part(states, whole_bytes, part_bytes) -> None:
    state = _state(states)
    header, parts = _snapshot_parts.split_snapshot(state, whole_bytes=whole_bytes, part_bytes=part_bytes)
    if len(state.encode()) <= whole_bytes:
        assert (header, parts) == (state.encode(), [])
        return
    assert parts and len(header) < len(state.encode())
    for part in parts:  # whole producers, at most part_bytes of them (+ the part's own fields), or one alone
        assert len(part) <= part_bytes + 100 or len(json.loads(part)["producers"]) == 1
    obj = load_json(header, what="header")
    assert _snapshot_parts.parts_of(obj, what="header", part_bytes=part_bytes) == (len(parts), len(state.producers))
    joined = _snapshot_parts.join_parts(obj, parts, version=state.version, producers_in_parts=len(state.producers),
                                        what="header")
    assert ManifestState.from_json(joined, what="joined") == state


def test_join_refuses_parts_of_another_snapshot_or_another_split() -> None:
    state = _state([500] * 10)
    header, parts = _snapshot_parts.split_snapshot(state, whole_bytes=100, part_bytes=1200)
    obj = load_json(header, what="h")
    assert _snapshot_parts.parts_of(obj, what="h", part_bytes=1200) == (len(parts), 10)

    def join(parts: list[bytes]) -> dict:
        return _snapshot_parts.join_parts(dict(obj), parts, version=7, producers_in_parts=10, what="h")

    assert ManifestState.from_json(join(parts), what="h") == state
    with pytest.raises(ManifestError, match="version=7 part=0"):
        join([parts[0], parts[0], *parts[2:]])
    other = _snapshot_parts.split_snapshot(_state([500] * 10, version=8), whole_bytes=100, part_bytes=1200)[1]
    with pytest.raises(ManifestError, match="names version=8"):
        join(other)
    # parts of two writers that split the same snapshot otherwise, mixed: refused, never a silent gap
    wider = _snapshot_parts.split_snapshot(state, whole_bytes=100, part_bytes=2400)[1]
    assert 1 < len(wider) < len(parts)
    with pytest.raises(ManifestError, match="hold [0-9]+ producers, the snapshot names 10|appear in two parts"):
        join([parts[0], *wider[1:]])
    first = set(json.loads(parts[0])["producers"]) | set().union(*(json.loads(w)["producers"] for w in wider[1:]))
    assert len(first) < 10  # the mix above really left producers out
    with pytest.raises(ManifestError, match="'parts' must be an integer"):
        _snapshot_parts.parts_of({"parts": 0, "producers": {}}, what="h")


@pytest.mark.parametrize("layout", [FLAT, KeyLayout(SPREAD_PREFIXES)], ids=["flat", "spread"])
def test_a_snapshot_over_the_reader_limit_is_written_in_parts_and_read_whole(layout: KeyLayout) -> None:
    store = MemoryStore(f"parts-{uuid.uuid4().hex}")
    state = _state([30_000] * 300, version=16)  # 300 shards at about the state limit: ~9 MiB of JSON
    assert len(state.encode()) > _reads.MAX_METADATA_BYTES
    _reads.put_snapshot(store, state, layout, where="")
    keys = store.list(SNAPSHOT_PREFIX)
    parts = [layout.snapshot_part_key(16, k) for k in range(len(keys) - 1)]
    assert sorted(keys) == sorted([layout.snapshot_key(16), *parts]) and len(parts) > 1
    if not layout.spread:  # flat: a snapshot's parts sort right after it
        assert keys == [snapshot_key(16), *parts] and parts[0] == snapshot_part_key(16, 0)
    else:  # spread: the parts of one snapshot take the prefixes in turn
        assert len({k.rsplit("/", 2)[1] for k in parts}) == min(len(parts), SPREAD_PREFIXES)
    assert [layout.snapshot_of(k) for k in parts] == [(16, k) for k in range(len(parts))]
    assert all(store.stat(k).size <= _reads.MAX_METADATA_BYTES for k in keys)
    assert _reads.read_snapshot(store, 16, layout, where="") == state
    store.delete(layout.snapshot_part_key(16, 1))  # the Reclaimer deletes an old snapshot part by part
    assert _reads.read_snapshot(store, 16, layout, where="") is None
    store.destroy()


def test_a_job_of_many_shards_keeps_snapshots_small_resumes_and_reclaims(tmp_path) -> None:
    """Format 2: a snapshot names the producers' table, whatever the number and size of their states."""
    store = LocalStore(str(tmp_path))
    spec = JobSpec.sharded("job", 12)
    for i in range(12):
        with Producer(store, producer_id=spec.producer_id(i), layout=LAYOUT, job=spec,
                      config=ProducerConfig(snapshot_every=4)) as p:
            p.append(BATCH, offset=0, state={"shard": i, "pad": "y" * 300})
            p.close(seal=i % 2 == 1)  # odd shards finish, even ones stop and resume below
    names = store.list(SNAPSHOT_PREFIX)  # in the namespace's key layout (spread: under 16 prefixes)
    assert names and not any(".part" in n for n in names)
    assert max(store.stat(n).size for n in names) < 2048  # 12 states of 300+ bytes
    for i in range(0, 12, 2):
        with Producer(store, producer_id=spec.producer_id(i), layout=LAYOUT, job=spec) as p:
            assert p.resume_offset == 1 and p.resume_state == {"shard": i, "pad": "y" * 300}
            p.close(seal=True)
    fresh = Manifest(LocalStore(str(tmp_path)))
    assert fresh.head().sealed and len(fresh.head().producers) == 12
    assert sum(1 for _ in tgb.DataLoader(str(tmp_path), mesh=tgb.Mesh(dp_rank=0, dp_size=1))) == 12
    record_watermark(store, "ck", {"tgb_cursor": {"step": 12, "version": fresh.latest_version()}})
    Reclaimer(store).run_once()
    kept = [fresh.key_layout().snapshot_of(k) for k in store.list(SNAPSHOT_PREFIX)]
    boundary = fresh.gc_boundary().version
    assert boundary > 0 and kept and all(s is not None and s[0] >= boundary for s in kept)  # older ones are gone
    assert Manifest(LocalStore(str(tmp_path))).head() == fresh.head()


def test_one_version_carries_at_most_max_version_entries(tmp_path) -> None:
    n = MAX_VERSION_ENTRIES + 1500  # all pending at once, as a policy of large counts or big segments make them
    config = ProducerConfig(max_pending=2 * n, segment_tgbs=n)
    with Producer(str(tmp_path), producer_id="p0", layout=LAYOUT, commit_policy=f"fixed:{2 * n}", config=config) as p:
        for offset in range(n):
            p.append(BATCH, offset=offset)
        p.close(seal=True)
    manifest = Manifest(LocalStore(str(tmp_path)))
    sizes = [len(manifest.read_version(v).entries) for v in range(1, manifest.latest_version() + 1)]
    assert max(sizes) == MAX_VERSION_ENTRIES and sum(sizes) == n
    assert sum(1 for _ in tgb.DataLoader(str(tmp_path), mesh=tgb.Mesh(dp_rank=0, dp_size=1))) == n


def test_a_version_over_the_reader_limit_is_refused_not_written(tmp_path, monkeypatch) -> None:
    from torch_tgb.manifest import _create

    monkeypatch.setattr(_create, "MAX_METADATA_BYTES", 700)  # an epoch bump fits (~640 B), 16 entries do not
    producer = Producer(str(tmp_path), producer_id="p0", layout=LAYOUT, commit_policy="fixed:16")
    for offset in range(16):
        producer.append(BATCH, offset=offset)
    with pytest.raises(ManifestError, match="over the metadata limit of 700"):
        producer.close()
    assert Manifest(LocalStore(str(tmp_path))).head().num_steps == 0  # nothing committed, still readable


def test_metadata_too_large_or_not_json_is_refused_before_anything_is_written(tmp_path) -> None:
    with pytest.raises(ValueError, match="over the limit of 1048576"):
        Producer(str(tmp_path / "a"), producer_id="p0", layout=LAYOUT, metadata={"notes": "x" * (1 << 20)})
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        Producer(str(tmp_path / "b"), producer_id="p0", layout=LAYOUT, metadata={"f": object()})
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def _nested(depth: int) -> dict:
    state: dict = {"leaf": 1}
    for _ in range(depth - 1):
        state = {"n": state}
    return state


def test_a_state_nested_deeper_than_a_version_holds_is_refused(tmp_path) -> None:
    with Producer(str(tmp_path), producer_id="p0", layout=LAYOUT) as p:
        with pytest.raises(ValueError, match=f"nested deeper than {MAX_STATE_DEPTH} levels"):
            p.append(BATCH, offset=0, state=_nested(MAX_STATE_DEPTH + 1))
        p.append(BATCH, offset=0, state=_nested(MAX_STATE_DEPTH))  # the deepest that fits is stored and read back
        p.close()
    with Producer(str(tmp_path), producer_id="p0", layout=LAYOUT) as p:
        assert p.resume_state == _nested(MAX_STATE_DEPTH)
        p.close(seal=True)
    assert sum(1 for _ in tgb.DataLoader(str(tmp_path), mesh=tgb.Mesh(dp_rank=0, dp_size=1))) == 1


def test_snapshot_parts_on_each_object_store(cloud_namespace, monkeypatch) -> None:
    """Parts are read with one get_ranges of 8 MiB + 1 byte each, past their end: every store answers it."""
    from torch_tgb.storage import open_store

    monkeypatch.setattr(_snapshot_parts, "WHOLE_BYTES", 512)
    monkeypatch.setattr(_snapshot_parts, "PART_BYTES", 256)
    store = create_namespace(open_store(*cloud_namespace), "spread")
    state = _state([100] * 6, version=32)
    _reads.put_snapshot(store, state, Manifest(store).key_layout(), where="")
    assert len(store.list(SNAPSHOT_PREFIX)) > 2
    assert Manifest(store).read_snapshot(32) == state
    store.delete(Manifest(store).key_layout().snapshot_part_key(32, 0))
    assert Manifest(store).read_snapshot(32) is None
