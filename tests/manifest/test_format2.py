"""Manifest format 2: the newest version names every producer through its table (docs/protocol.md, *Format 2*)."""

from __future__ import annotations

import uuid

import pytest
from _manifest_helpers import CountingStore, commit, entries, legacy_log, started

from torch_tgb.checkpoint import Reclaimer, record_watermark
from torch_tgb.manifest import Committer, JobSpec, Manifest
from torch_tgb.manifest._state import fold
from torch_tgb.manifest._table import PRODUCERS_PREFIX, STATE_PREFIX
from torch_tgb.manifest.records import FORMAT2, INLINE_STATE_BYTES
from torch_tgb.storage import MemoryStore

from tests._key_layouts import KEY_LAYOUTS, create_namespace


@pytest.fixture(params=KEY_LAYOUTS)
def store(request) -> MemoryStore:
    s = create_namespace(MemoryStore(f"format2-{uuid.uuid4().hex}"), request.param)
    yield s
    s.destroy()


def test_a_commit_after_many_others_costs_the_same_requests(store) -> None:
    """The rebase reads the newest version and our bucket, not the versions others wrote meanwhile."""
    away = started(store, "away")
    commit(away, 1)
    others = [started(store, f"o{i}") for i in range(8)]
    costs = []
    for between in (1, 40):
        for _ in range(between):
            for o in others:
                commit(o, 1)
        counting = CountingStore(store)
        away.store = away.manifest.store = counting  # type: ignore[misc]
        commit(away, 1)
        away.store = away.manifest.store = store  # type: ignore[misc]
        costs.append(counting.calls["get"] + counting.calls["get_range"] + counting.calls["exists"])
    assert costs[1] <= costs[0] + 2  # 8 vs 320 versions in between: the same few reads
    assert costs[1] <= 8


def test_readers_read_no_producer_state(store) -> None:
    c = started(store, "p0")
    c.attempt(entries("p0", 0, 3), state={"blob": "x" * (4 * INLINE_STATE_BYTES)})  # out of line
    commit(started(store, "p1"), 2)
    counting = CountingStore(store)
    reader = Manifest(counting)
    head = reader.head()
    assert head.num_steps == 5 and len(reader.entries(0, 5)) == 5
    read = [k for k in counting.range_keys] + [k for k, _ in counting.calls.items()]
    assert not [k for k in counting.range_keys if k.startswith((PRODUCERS_PREFIX, STATE_PREFIX))], read
    for number in range(1, head.version + 1):
        raw = store.get(Manifest(store).version_key(number))
        assert b"blob" not in raw and FORMAT2.encode() in raw


def test_a_large_pipeline_state_commits_and_resumes_exactly(store) -> None:
    """A Mix over 1,000 sources carries ~140 KB of state: kept in its own object, read back by its producer."""
    state = {"sources": {f"s{i:04d}": {"unit": i, "record": 3 * i, "rng": [i, 7, 11]} for i in range(1000)}}
    c = started(store, "mix")
    assert c.attempt(entries("mix", 0, 2), state=state).committed
    assert [k for k in store.list(STATE_PREFIX)]  # out of line
    again = started(store, "mix")
    assert again.next_offset == 2 and again.resume_state == state


def test_a_format1_namespace_moves_to_format2_keeping_every_state(store) -> None:
    newest = legacy_log(store, 3, per_version=2)
    c = started(store, "p1")  # the first format-2 commit writes the whole table
    commit(c, 1)
    head = Manifest(store).head()
    assert head.table is not None and head.num_steps == 7
    assert head.producers["p0"].state == {"position": 6} and head.producers["p0"].next_offset == 6
    assert Manifest(store).read_version(newest).table is None  # older versions stay as written
    p0 = started(store, "p0")
    assert p0.next_offset == 6 and p0.resume_state == {"position": 6} and p0.epoch == 2


def test_fold_of_a_format2_version_does_not_read_the_table(store) -> None:
    """Folding costs O(1) whatever the job's size: the seal rule uses the table's count of shards done."""
    job = JobSpec.sharded("big", 65536)
    c = Committer(Manifest(store), job.producer_id(7), job=job)
    c.start()
    commit(c, 1)
    m = Manifest(store)
    v1, v2 = m.read_version(1), m.read_version(2)
    state = fold(fold(m.head().__class__(0, 0, False, {}), v1), v2)  # no bucket is read: none attached
    assert state.num_steps == 1 and state.table is not None and state.table.open == 1


def test_the_reclaimer_deletes_old_buckets_and_states(store) -> None:
    c = started(store, "p0")
    for i in range(6):
        assert c.attempt(entries("p0", 2 * i, 2), state={"i": i, "pad": "y" * 5000}).committed
    before = {k for k in store.list("_tgb/") if k.startswith((PRODUCERS_PREFIX, STATE_PREFIX))}
    head = Manifest(store).head()
    record_watermark(store, "ck", {"tgb_cursor": {"step": head.num_steps, "version": head.version}})
    report = Reclaimer(store, grace_period=0).run_once()
    after = {k for k in store.list("_tgb/") if k.startswith((PRODUCERS_PREFIX, STATE_PREFIX))}
    assert report.table_objects > 0 and after < before
    again = started(store, "p0")  # what the producer needs to resume is still there
    assert again.next_offset == 12 and again.resume_state == {"i": 5, "pad": "y" * 5000}
