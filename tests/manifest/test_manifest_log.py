"""Reading the log: discovery by probing, O(log n) step lookup, snapshots, GC boundary, dataset.json."""

from __future__ import annotations

import dataclasses
import math
import uuid

import pytest
from _manifest_helpers import CountingStore, HookStore, commit, entries, legacy_log, reclaim_to, started

from torch_tgb.errors import ManifestError, ObjectNotFound, SchemaMismatch
from torch_tgb.layout import Layout
from torch_tgb.manifest import (
    DATASET_KEY,
    GC_BOUNDARY_KEY,
    GC_BOUNDARY_PREFIX,
    SNAPSHOT_HINT_KEY,
    boundary_key,
    Manifest,
)
from torch_tgb.storage import LocalStore, MemoryStore

from tests._key_layouts import KEY_LAYOUTS, create_namespace


@pytest.fixture(params=KEY_LAYOUTS)
def store(request) -> MemoryStore:
    s = create_namespace(MemoryStore(f"manifest-{uuid.uuid4().hex}"), request.param)
    yield s
    s.destroy()


@pytest.fixture
def bare() -> MemoryStore:
    """A store without a dataset.json (tests of what a namespace without one costs and reads)."""
    s = MemoryStore(f"manifest-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def build(store, versions: int, per_version: int = 3, snapshot_every: int = 8) -> list[int]:
    """One producer commits ``versions`` versions of ``per_version`` entries (its registration writes none)."""
    c = started(store, "p0", snapshot_every=snapshot_every)
    return [commit(c, per_version) for _ in range(versions)]


def test_empty_namespace(bare) -> None:
    m = Manifest(bare)
    assert m.latest_version() == 0
    head = m.head()
    assert (head.version, head.num_steps, head.sealed, dict(head.producers)) == (0, 0, False, {})
    assert m.entries(0, 10) == []
    with pytest.raises(ManifestError, match="step=0 is not committed"):
        m.entry(0)
    assert m.dataset() is None


def test_latest_version_by_probing_is_logarithmic(bare) -> None:
    build(bare, 200, per_version=1, snapshot_every=10_000)  # no snapshot: probing starts at 0
    counting = CountingStore(bare)
    m = Manifest(counting)
    assert m.latest_version() == 200
    # boundary + hint + exponential and binary probing over 200 versions
    assert counting.calls["exists"] <= 2 * math.ceil(math.log2(201)) + 2
    assert counting.total <= 2 * math.ceil(math.log2(201)) + 4
    counting.reset()
    assert m.latest_version() == 200  # warm and idle: one probe plus the boundary ...
    assert counting.total == 3  # ... a LIST of its generations, none yet: also the pre-generation object
    bare.put_if_absent(boundary_key(0, 0), b"{}")  # what creating dataset.json writes
    counting.reset()
    assert m.latest_version() == 200
    assert counting.calls["exists"] == 1 and counting.calls["list"] == 1 and counting.total == 2


def test_hint_bounds_cold_start(store) -> None:
    build(store, 100, per_version=2, snapshot_every=16)
    counting = CountingStore(store)
    m = Manifest(counting)
    head = m.head()
    assert (head.version, head.num_steps) == (100, 200)
    assert head.producers["p0"].next_offset == 200
    # boundary, hint, snapshot 96, probes from 96, then replay of 97..100
    assert counting.calls["get"] <= 3 + 5 + 2
    assert counting.total <= 20


def test_entry_lookup_cold_is_logarithmic(store) -> None:
    build(store, 300, per_version=4, snapshot_every=32)
    expected = [e.key for e in entries("p0", 0, 1200)]
    for step in (0, 1, 599, 1199):
        counting = CountingStore(store)
        m = Manifest(counting)
        assert m.entry(step).key == expected[step]
        assert counting.calls["get"] <= math.ceil(math.log2(301)) + 6, counting.calls
    m = Manifest(store)
    assert [e.key for e in m.entries(5, 1300)] == expected[5:]
    assert [e.key for e in m.entries(398, 402)] == expected[398:402]
    assert m.entries(1200, 1300) == []
    with pytest.raises(ManifestError, match="step=1200 is not committed"):
        m.entry(1200)


def test_entries_with_empty_versions_between(store) -> None:
    c = started(store, "p0")
    commit(c, 2)
    assert started(store, "p1").attempt([], mark="closed").committed  # a version with no entries
    commit(c, 3)
    m = Manifest(store)
    assert [e.offset for e in m.entries(0, 10)] == [0, 1, 2, 3, 4]
    assert m.entry(2).offset == 2


def test_snapshot_and_hint_written_every_k(store) -> None:
    build(store, 20, snapshot_every=8)
    snapshot_key = Manifest(store).key_layout().snapshot_key
    assert store.exists(snapshot_key(8)) and store.exists(snapshot_key(16))
    assert not store.exists(snapshot_key(9))
    m = Manifest(store)
    assert m._read_hint() == 16
    snap = m.read_snapshot(16)
    assert snap == m.state_at(16)


def test_write_snapshot_any_version_idempotent(store) -> None:
    build(store, 10, snapshot_every=1000)
    m = Manifest(store)
    first = m.write_snapshot(5)
    assert m.write_snapshot(5) == first
    assert first.num_steps == 15  # 5 versions of 3 entries (registration writes no version)
    with pytest.raises(ManifestError, match="not committed"):
        m.write_snapshot(50)


def test_corrupt_version_fails_loud_naming_it(store) -> None:
    build(store, 5)
    store.put(Manifest(store).version_key(3), b'{"format": "tgb-manifest/2", "version": 3}')
    assert Manifest(store).head().version == 5  # format 2: the newest version alone names the state
    with pytest.raises(ManifestError, match="version=3"):
        Manifest(store).entries(0, 100)


def test_corrupt_version_of_a_format1_log_fails_loud_on_replay(store) -> None:
    legacy_log(store, 5)
    store.put(Manifest(store).version_key(3), b'{"format": "tgb-manifest/1", "version": 3}')
    with pytest.raises(ManifestError, match="version=3: missing field"):
        Manifest(store).head()
    with pytest.raises(ManifestError, match="version=3"):
        Manifest(store).entries(0, 100)


@pytest.mark.parametrize("log", ["format2", "format1"])
def test_non_monotonic_first_step_detected(store, log) -> None:
    if log == "format2":
        build(store, 6, per_version=2, snapshot_every=1000)
    else:
        legacy_log(store, 6, per_version=2)
    m = Manifest(store)
    bad = m.read_version(4)
    forged = dataclasses.replace(bad, first_step=100)
    store.put(Manifest(store).version_key(4), forged.encode())
    if log == "format1":  # a replay folds every version; format 2 reads the newest only
        with pytest.raises(ManifestError, match="version=4: first_step=100"):
            Manifest(store).head()
    with pytest.raises(ManifestError, match="version="):
        Manifest(store).entries(0, 20)


def test_gc_boundary_protocol(store) -> None:
    build(store, 20, per_version=2, snapshot_every=1000)
    m = Manifest(store)
    assert m.gc_boundary().version == 0
    with pytest.raises(ManifestError, match="write_snapshot"):
        m.advance_gc_boundary(10, 0)
    m.write_snapshot(10)
    first = m.read_version(10).first_step
    stop = m.read_version(10).stop_step
    with pytest.raises(ManifestError, match="a later version must be the boundary"):
        m.advance_gc_boundary(10, stop + 1)
    with pytest.raises(ManifestError, match="above the GC boundary"):
        m.delete_versions_below(10)
    boundary = m.advance_gc_boundary(10, first)
    assert (boundary.version, boundary.step) == (10, first)
    assert store.list(GC_BOUNDARY_PREFIX) == [boundary_key(10, first)]
    with pytest.raises(ManifestError, match="only forward"):
        m.advance_gc_boundary(9, 0)
    assert m.delete_versions_below(10) == 9
    assert not store.exists(Manifest(store).version_key(9)) and store.exists(Manifest(store).version_key(10))

    cold = Manifest(store)  # hint points below the boundary: start from the boundary's snapshot
    head = cold.head()
    assert (head.version, head.num_steps) == (20, 40)
    assert cold.entry(first).offset == first
    assert [e.offset for e in cold.entries(first, 40)] == list(range(first, 40))
    with pytest.raises(ManifestError, match="reclaimed"):
        cold.entry(first - 1)
    with pytest.raises(ManifestError, match="reclaimed"):
        cold.state_at(5)

    # inside the boundary version: its record stays, its steps below the boundary step are gone
    inside = m.advance_gc_boundary(10, first + 1)
    assert (inside.version, inside.step) == (10, first + 1)
    fresh = Manifest(store)
    assert [e.offset for e in fresh.entries(first + 1, 40)] == list(range(first + 1, 40))
    with pytest.raises(ManifestError, match="reclaimed"):
        fresh.entry(first)


def test_warm_reader_notices_reclamation(store) -> None:
    c = started(store, "p0", snapshot_every=1000)
    for _ in range(5):
        commit(c, 1)
    reader = Manifest(store)
    assert reader.head().num_steps == 5
    for _ in range(10):
        commit(c, 1)
    m = Manifest(store)
    m.write_snapshot(12)
    m.advance_gc_boundary(12, m.read_version(12).first_step)
    m.delete_versions_below(12)
    head = reader.head()  # its cached state (version 5) cannot be replayed any more
    assert (head.version, head.num_steps) == (15, 15)


def test_dataset_created_once_and_mismatch_names_both(bare) -> None:
    m = Manifest(bare)
    schema = {"input_ids": {"dtype": "int32", "shape": [16]}}
    info = m.ensure_dataset(Layout(dp=2, seq_keys=("input_ids",)), schema)
    assert Manifest(bare).dataset() == info
    assert m.ensure_dataset(Layout(dp=2, seq_keys=("input_ids",)), schema) == info
    other = {"input_ids": {"dtype": "int64", "shape": [16]}}
    with pytest.raises(SchemaMismatch) as e:
        m.ensure_dataset(Layout(dp=2, seq_keys=("input_ids",)), other)
    assert info.fingerprint in str(e.value)
    with pytest.raises(SchemaMismatch, match=info.fingerprint):
        m.ensure_dataset(Layout(dp=4, seq_keys=("input_ids",)), schema)


def test_dataset_variable_shape_accepted(store) -> None:
    m = Manifest(store)
    m.ensure_dataset(Layout(), {"x": {"dtype": "int32", "shape": [-1]}})
    assert m.ensure_dataset(Layout(), {"x": {"dtype": "int32", "shape": [7]}}).schema["x"]["shape"] == [-1]


def test_missing_version_is_object_not_found(store) -> None:
    build(store, 2)
    with pytest.raises(ObjectNotFound, match="version=9"):
        Manifest(store).read_version(9)


def test_malformed_hint_and_boundary_fail_loud(bare) -> None:
    build(bare, 2)
    bare.put(SNAPSHOT_HINT_KEY, b"[]")
    with pytest.raises(ManifestError, match="snapshot_hint"):
        Manifest(bare).head()
    bare.put(SNAPSHOT_HINT_KEY, b'{"format": "tgb-manifest/1", "version": 0}')
    bare.put(GC_BOUNDARY_KEY, b'{"format": "tgb-manifest/1", "version": "x", "step": 0}')
    with pytest.raises(ManifestError, match="gc_boundary"):
        Manifest(bare).latest_version()


def test_local_directory_store(tmp_path) -> None:
    store = LocalStore(tmp_path)
    build(store, 12, snapshot_every=4)
    m = Manifest(store)
    assert m.head().num_steps == 36
    snapshot_key = Manifest(store).key_layout().snapshot_key
    assert sorted(store.list("_tgb/snapshots/")) == sorted([snapshot_key(4), snapshot_key(8), snapshot_key(12)])


def test_replay_uses_threads_for_a_remote_store_only(tmp_path, store, monkeypatch) -> None:
    """A local directory's versions are read one after another (a thread pool costs more than the reads); a
    store without local paths still fetches them concurrently. Both fold the same state."""
    import concurrent.futures

    pools: list[int] = []
    real = concurrent.futures.ThreadPoolExecutor

    def counting(*args, **kwargs):
        pools.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", counting)
    local = LocalStore(tmp_path)
    for s in (local, store):
        legacy_log(s, 7)  # format 1, no snapshot: a cold head() replays all 8 versions
    assert Manifest(local).head().num_steps == 21 and not pools
    assert Manifest(store).head().num_steps == 21 and pools


def test_cold_start_racing_a_reclamation(store) -> None:
    """B4: a reclaimer pass between the hint read and the probes; head() starts again from the new boundary."""
    c = started(store, "p0", snapshot_every=1000)
    for _ in range(12):
        commit(c, 1)
    hooked = HookStore(store, "get", lambda k: k == SNAPSHOT_HINT_KEY, lambda: reclaim_to(store, 10))
    head = Manifest(hooked).head()
    assert hooked.fired and (head.version, head.num_steps) == (12, 12)


def warm_reader(store, *, later: int) -> Manifest:
    """A reader that cached the state at version 2 of a format-1 log, then ``later`` more one-entry versions."""
    legacy_log(store, 1, per_version=1)
    reader = Manifest(store)
    assert reader.head().version == 2
    legacy_log(store, later, per_version=1, start=2)
    return reader


def test_warm_reader_with_stale_boundary_recovers(bare) -> None:
    """B7: the cached state's replay hits deleted versions; the fallback re-reads the boundary."""
    reader = warm_reader(bare, later=10)
    hooked = HookStore(bare, "get", lambda k: k == GC_BOUNDARY_KEY, lambda: reclaim_to(bare, 8))
    reader.store = hooked
    head = reader.head()
    assert hooked.fired and head.num_steps == 11


def test_giant_metadata_is_not_read_whole(store) -> None:
    """B6: a planted 9 MiB version is refused after reading at most the limit (+1 byte)."""
    build(store, 1)
    from torch_tgb.manifest._json import MAX_METADATA_BYTES

    store.put(Manifest(store).version_key(3), b" " * (MAX_METADATA_BYTES + 1024 * 1024))
    counting = CountingStore(store)
    with pytest.raises(ManifestError, match="version=3: more than .* exceeds the metadata limit"):
        Manifest(counting).read_version(3)
    # one bounded read of the version (and of dataset.json, where the key layout comes from)
    assert counting.calls["get"] == 0 and counting.range_keys == {Manifest(store).version_key(3): 1, DATASET_KEY: 1}


def test_warm_reader_never_replays_a_zombie_version_below_the_boundary(store) -> None:
    """Chaos seed 1008 (faulty store): a reader whose cached state lies below a new GC boundary replayed a
    version that a stalled committer had just re-created in a reclaimed slot (it deletes it once it reads
    the boundary) and failed with a fork error. Slots below the boundary are never read."""
    reader = warm_reader(store, later=10)
    reclaim_to(store, 8)
    # a stalled committer's version 3, built on the view it had: well-formed, but it does not follow version 2
    zombie = dataclasses.replace(reader.read_version(2), number=3, first_step=0, token="0" * 32)
    store.put(Manifest(store).version_key(3), zombie.encode())
    head = reader.head()
    assert (head.version, head.num_steps) == (12, 11)


def test_a_zombie_that_folds_cleanly_is_not_trusted(store) -> None:
    """The boundary moves past a reader's replay and a stalled committer re-creates a reclaimed slot with a
    version that folds cleanly onto the real chain: the reader must start again from the boundary, not keep it."""
    reader = warm_reader(store, later=6)
    real = Manifest(store).read_version(5)
    zombie_key = real.entries[0].key.replace("-o", "-o9")[: len(real.entries[0].key)]

    def reclaim_then_recreate() -> None:
        reclaim_to(store, 6)
        entry = dataclasses.replace(real.entries[0], key=zombie_key)
        store.put(Manifest(store).version_key(5), dataclasses.replace(real, token="1" * 32, entries=(entry,)).encode())

    fourth = Manifest(store).version_key(4)
    hooked = HookStore(store, "get", lambda k: k == fourth, reclaim_then_recreate)
    hooked.max_in_flight = 1  # the replay reads versions in order
    reader.store = hooked
    head = reader.head()
    assert hooked.fired and (head.version, head.num_steps) == (8, 7)
    assert 5 not in reader._versions  # the re-created slot was read, and is not kept: nothing below the boundary is
