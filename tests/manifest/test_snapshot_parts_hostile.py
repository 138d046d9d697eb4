"""Snapshots in parts that do not add up: refused before they cost memory, read as missing, never an outage.

- A header is one small object: naming 128 parts (4,096 allowed) made every cold
  reader and producer fetch up to 8 MiB per part before anything was checked. A
  count no writer makes for the producers named is refused before any part is read;
  parts are then fetched a window at a time and each is checked as it arrives.
- Two writers that split one snapshot differently (a rolling upgrade to another
  part size) leave a header and parts that do not join: every ``head()`` raised
  ``ManifestError``. Now it falls back as a missing part does: an older snapshot
  (or the empty state) plus a replay of the log, with a warning naming the snapshot.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from _manifest_helpers import commit, legacy_log, started
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import ManifestError
from torch_tgb.manifest import Manifest, ManifestState, ProducerState
from torch_tgb.manifest import _reads, _snapshot_parts
from torch_tgb.manifest._json import dump_json, load_json
from torch_tgb.manifest.keys import FLAT, SNAPSHOT_HINT_KEY, snapshot_key, snapshot_part_key
from torch_tgb.manifest.records import FORMAT
from torch_tgb.storage import MemoryStore
from torch_tgb.testing.counting import CountingStore

PRODUCERS = 12


@pytest.fixture
def namespace():
    """A format-1 namespace of 12 producers, 2 versions each; its state, computed by a full replay.

    Format 1: a format-2 head never reads a snapshot (its newest version names every producer), and its
    snapshots are never in parts; snapshots in parts are what namespaces written before it hold.
    """
    inner = MemoryStore(f"parts-hostile-{uuid.uuid4().hex}")
    store = CountingStore(inner)
    newest = 0
    for i in range(PRODUCERS):
        newest = legacy_log(store, 2, per_version=1, producer=f"p{i:02d}", start=newest)
    truth = Manifest(inner, snapshot_every=1 << 20).head()
    yield store, truth
    inner.destroy()


def _plant(store, version: int, header: bytes, parts: list[bytes]) -> None:
    for k, part in enumerate(parts):
        store.put(snapshot_part_key(version, k), part)
    store.put(snapshot_key(version), header)
    store.put(SNAPSHOT_HINT_KEY, dump_json({"format": FORMAT, "version": version}))


def _part_reads(store: CountingStore) -> int:
    return sum(n for key, n in store.range_keys.items() if ".part" in key)


def _hostile_header(state: ManifestState, parts: int, producers: int) -> bytes:
    return dump_json({**state.to_json(), "producers": {}, "parts": parts, "parts_producers": producers})


def _cold_head(store, caplog) -> ManifestState:
    store.reset()
    with caplog.at_level(logging.WARNING, logger="torch_tgb.manifest._reads"):
        return Manifest(store).head()


def test_a_header_naming_more_parts_than_its_producers_fill_is_refused_before_any_part_is_read(namespace, caplog):
    store, truth = namespace
    junk = b"x" * (64 << 10)  # 128 planted parts; at 8 MiB each this was 1 GiB in every cold reader
    _plant(store, truth.version, _hostile_header(truth, 128, 128), [junk] * 128)
    assert _cold_head(store, caplog) == truth  # from the log, not from the planted snapshot
    assert _part_reads(store) == 0
    assert any(snapshot_key(truth.version) in r.getMessage() and "names 128 parts for 128 producers" in r.getMessage()
               for r in caplog.records)


def test_garbage_parts_under_a_plausible_header_cost_one_window(namespace, caplog):
    store, truth = namespace
    _plant(store, truth.version, _hostile_header(truth, 64, 10**6), [b"x" * (64 << 10)] * 64)
    assert _cold_head(store, caplog) == truth
    assert 0 < _part_reads(store) <= 2 * _snapshot_parts.PART_WINDOW  # the hint, then the same snapshot listed
    assert any(snapshot_key(truth.version) in r.getMessage() for r in caplog.records)


def test_a_snapshot_joined_from_two_writers_that_split_it_differently_falls_back_to_a_replay(
        namespace, caplog, monkeypatch):
    """Writer B writes its parts, writer A (smaller parts) its parts and header, B's header lands last."""
    monkeypatch.setattr(_snapshot_parts, "PART_BYTES", 1024)  # both writers' part sizes pass the header check
    store, truth = namespace
    header_a, parts_a = _snapshot_parts.split_snapshot(truth, whole_bytes=100, part_bytes=200)
    header_b, parts_b = _snapshot_parts.split_snapshot(truth, whole_bytes=100, part_bytes=500)
    assert 1 < len(parts_b) < len(parts_a)
    _plant(store, truth.version, header_b, parts_b)
    _plant(store, truth.version, header_a, parts_a)
    store.put(snapshot_key(truth.version), header_b)
    with pytest.raises(ManifestError, match="producers"):  # the join itself is refused ...
        _snapshot_parts.join_parts(load_json(header_b, what="h") | {"producers": {}},
                                   [store.get(snapshot_part_key(truth.version, k)) for k in range(len(parts_b))],
                                   version=truth.version, producers_in_parts=PRODUCERS, what="h")
    assert _cold_head(store, caplog) == truth  # ... and every head() still answers, from the log
    assert any(snapshot_key(truth.version) in r.getMessage() and "older snapshot and a replay" in r.getMessage()
               for r in caplog.records)
    c = started(store, "p00")  # a producer starts and commits on it too
    commit(c, 1)
    assert Manifest(store).head().num_steps == truth.num_steps + 1
    _reads.put_snapshot(store, truth, FLAT, where="")  # writing the snapshot again repairs it
    store.reset()
    assert _reads.read_snapshot(store, truth.version, FLAT, where="") == truth


def test_a_refused_hint_falls_back_to_the_boundary_snapshot_not_to_the_start(namespace, caplog, monkeypatch):
    monkeypatch.setattr(_snapshot_parts, "PART_BYTES", 1024)
    store, truth = namespace
    boundary = truth.version - 4
    manifest = Manifest(store)
    manifest.write_snapshot(boundary)
    manifest.advance_gc_boundary(boundary, 0)
    header_b, parts_b = _snapshot_parts.split_snapshot(truth, whole_bytes=100, part_bytes=500)
    assert len(parts_b) > 1
    _plant(store, truth.version, header_b, [parts_b[0], *parts_b[:-1]])  # part 1 is part 0 again
    assert _cold_head(store, caplog) == truth
    replayed = [int(k.rsplit("/", 1)[1][:20]) for k in store.range_keys if k.startswith("_tgb/log/")]
    assert replayed and min(replayed) >= boundary  # the boundary's snapshot, then the versions above it
    assert any(snapshot_key(truth.version) in r.getMessage() for r in caplog.records)


def test_a_part_holding_more_bytes_than_its_producers_can_is_refused():
    producer = ProducerState(1, 1, 0.0, {"pad": "x" * (40 << 10)}).to_json()  # over the 32 KiB state limit
    normal = ProducerState(1, 1, 0.0).to_json()
    parts = [dump_json({"format": FORMAT, "version": 3, "part": 0, "producers": {"a": producer}}),
             dump_json({"format": FORMAT, "version": 3, "part": 1, "producers": {"b": normal}})]
    header = {"format": FORMAT, "version": 3, "num_steps": 0, "sealed": False, "producers": {}}
    with pytest.raises(_snapshot_parts.RefusedParts, match="part 0: .* bytes for 1 producers"):
        _snapshot_parts.join_parts(dict(header), parts, version=3, producers_in_parts=2, what="h")


def test_parts_with_more_producers_than_named_are_refused_at_the_first_part_that_shows_it():
    group = {f"p{i}": ProducerState(1, 1, 0.0).to_json() for i in range(5)}
    part = dump_json({"format": FORMAT, "version": 3, "part": 0, "producers": group})
    join = _snapshot_parts.PartsJoin({}, version=3, count=4, producers=6, what="h")
    with pytest.raises(_snapshot_parts.RefusedParts, match="hold 5 producers and 3 more parts follow"):
        join.add(part)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 900), min_size=1, max_size=60), st.integers(4 * 1200 + 4, 40_000), st.data())
def test_the_parts_bound_never_refuses_a_snapshot_a_writer_splits(states, part_bytes, data):
    """At the writers' part size, or any down to a quarter of it, the header passes :func:`max_parts`.

    Scaled down: producers of at most ~1 KiB (states up to 900 bytes) stand for the 33 KiB of a real one.
    """
    actual = data.draw(st.integers(part_bytes // 4, part_bytes))
    producers = {f"p{i:04d}": ProducerState(1, i + 1, 1.5, {"pos": "x" * n} if n else None)
                 for i, n in enumerate(states)}
    state = ManifestState(9, 3, False, producers)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_snapshot_parts, "MAX_PRODUCER_JSON", 1200)
        assert max(len(dump_json({k: v.to_json()})) for k, v in producers.items()) <= 1200
        header, parts = _snapshot_parts.split_snapshot(state, whole_bytes=1, part_bytes=actual)
        obj = json.loads(header)
        assert _snapshot_parts.parts_of(obj, what="h", part_bytes=part_bytes) == (len(parts), len(producers))
        joined = _snapshot_parts.join_parts(obj, parts, version=9, producers_in_parts=len(producers), what="h")
    assert ManifestState.from_json(joined, what="h") == state


def test_a_part_whose_producer_fields_are_invalid_is_read_as_missing(namespace, caplog, monkeypatch):
    monkeypatch.setattr(_snapshot_parts, "PART_BYTES", 1024)
    store, truth = namespace
    header, parts = _snapshot_parts.split_snapshot(truth, whole_bytes=100, part_bytes=500)
    bad = json.loads(parts[-1])
    bad["producers"][next(iter(bad["producers"]))]["epoch"] = 0  # epochs start at 1
    _plant(store, truth.version, header, [*parts[:-1], dump_json(bad)])
    assert _cold_head(store, caplog) == truth
    assert any("epoch" in r.getMessage() and snapshot_key(truth.version) in r.getMessage() for r in caplog.records)
