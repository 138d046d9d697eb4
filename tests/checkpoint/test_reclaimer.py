"""Reclaimer: boundary, deletions, orphans, idempotence, kills at every point."""

from __future__ import annotations

import time
import uuid

import pytest

from _lifecycle import KillAfter, Namespace, assert_resumable
from torch_tgb.checkpoint._reclaim_state import RECLAIMER_KEY
from torch_tgb.checkpoint import Reclaimer, keep_last, record_watermark, retire, safe_boundary
from torch_tgb.errors import ManifestError, StorageError
from torch_tgb.manifest import Manifest
from torch_tgb.storage import MemoryStore

from tests._key_layouts import KEY_LAYOUTS, create_namespace

LATER = 10 * 3600.0  # a clock this far ahead makes every object older than the default grace period


@pytest.fixture(params=KEY_LAYOUTS)
def store(request):
    s = create_namespace(MemoryStore(f"rc-{uuid.uuid4().hex}"), request.param)
    yield s
    s.destroy()


def cursor(step: int) -> dict:
    return {"tgb_cursor": {"step": step, "version": 1}}


def filled(store, versions: int = 10, per_version: int = 3) -> Namespace:
    ns = Namespace(store)  # registered: no version
    for _ in range(versions):
        ns.commit(per_version)  # versions 1..: steps [3(v-1), 3v)
    return ns


def test_nothing_live_deletes_nothing(store):
    ns = filled(store)
    before = store.list()
    report = Reclaimer(store).run_once()
    assert (report.objects, report.versions, report.boundary_step, report.safe_step) == (0, 0, 0, 0)
    assert [k for k in store.list() if k != RECLAIMER_KEY] == before  # only the pass's record is new
    assert_resumable(store, 0, ns.keys)


def test_deletes_everything_below_the_safe_step(store):
    ns = filled(store)
    record_watermark(store, "ck-14", cursor(14))
    record_watermark(store, "ck-20", cursor(20))
    report = Reclaimer(store).run_once()
    # step 14 is in the version of steps 12..14 (version 5): versions 1..4 go, version 5's
    # record stays, and the objects of steps 0..13 go -- also steps 12 and 13 inside version 5
    assert (report.safe_step, report.boundary_step, report.boundary_version) == (14, 14, 5)
    assert report.objects == 14 and report.bytes == 14 * 64
    assert report.versions == 4  # versions 1..4
    m = Manifest(store)
    keys = m.key_layout()  # what is left under the log and snapshot prefixes, whatever the key layout:
    assert sorted(store.list("_tgb/log/")) == sorted(keys.version_key(v) for v in range(5, m.latest_version() + 1))
    assert store.list("_tgb/snapshots/") == [keys.snapshot_key(5)]  # older ones (16 per snapshot_every) gone
    assert [k for k in ns.keys if store.exists(k)] == ns.keys[14:]
    assert Manifest(store).gc_boundary().step == 14
    assert_resumable(store, 14, ns.keys)
    assert_resumable(store, 20, ns.keys)
    again = Reclaimer(store).run_once()
    assert (again.objects, again.versions, again.orphans, again.bytes) == (0, 0, 0, 0)


def test_old_snapshots_and_versions_go_in_either_key_layout(store):
    """The Reclaimer finds what is below the boundary by LIST in each layout (spread keys sort by prefix first)."""
    filled(store)
    reclaimer = Reclaimer(store)
    record_watermark(store, "ck-6", cursor(6))
    assert reclaimer.run_once().boundary_version == 3  # steps 6..8
    retire(store, "ck-6")
    record_watermark(store, "ck-21", cursor(21))
    report = reclaimer.run_once()
    assert (report.boundary_version, report.versions, report.snapshots) == (8, 5, 1)  # versions 3..7, snapshot 3
    m = Manifest(store)
    keys = m.key_layout()
    assert store.list("_tgb/snapshots/") == [keys.snapshot_key(8)]
    assert sorted(store.list("_tgb/log/")) == sorted(keys.version_key(v) for v in range(8, m.latest_version() + 1))


def test_boundary_follows_retirements_and_never_moves_back(store):
    ns = filled(store)
    for step in (3, 9, 15):
        record_watermark(store, f"ck-{step}", cursor(step))
    reclaimer = Reclaimer(store)
    assert reclaimer.run_once().boundary_step == 3
    assert keep_last(store, 1) == ["ck-3", "ck-9"]
    report = reclaimer.run_once()
    assert report.boundary_step == 15 and report.live_checkpoints == 1 and report.checkpoints_dropped == 2
    assert not store.exists("_tgb/watermarks/ck-3.json")  # retired checkpoints are dropped:
    assert not store.exists("_tgb/retired/ck-3")  # watermark, then marker
    retire(store, "ck-15")
    assert safe_boundary(store) == 0
    report = reclaimer.run_once()
    assert report.boundary_step == 15 and report.objects == 0  # no live checkpoint: keep everything left
    with pytest.raises(ManifestError, match="reclaimed"):
        record_watermark(store, "late", cursor(4))  # a checkpoint that could not resume is refused
    assert not store.exists("_tgb/watermarks/late.json")
    record_watermark(store, "ck-3", cursor(16))  # a dropped id is free again, above the boundary
    assert safe_boundary(store) == 16
    assert_resumable(store, 15, ns.keys)


def test_all_consumed_keeps_the_newest_version(store):
    ns = filled(store, versions=4)
    record_watermark(store, "end", cursor(ns.num_steps))
    report = Reclaimer(store).run_once()
    # the newest version's record stays (the log must stay readable), none of its objects do
    assert report.boundary_version == 4 and report.boundary_step == ns.num_steps == 12
    assert store.list("data/") == []
    assert_resumable(store, ns.num_steps, ns.keys)


def test_producers_keep_committing_after_reclamation(store):
    ns = filled(store)
    record_watermark(store, "ck", cursor(20))
    Reclaimer(store).run_once()
    ns.commit(3)  # the running committer continues past the boundary
    ns.restart()  # a restarted producer starts from the boundary's snapshot
    ns.commit(2)
    assert Manifest(store).head().num_steps == 35
    assert_resumable(store, 20, ns.keys)


def test_orphans_deleted_only_after_grace_period(store):
    ns = filled(store, versions=3)
    old = ns.orphan()
    assert Reclaimer(store).run_once().orphans == 0  # just written: may still be committed
    report = Reclaimer(store, clock=lambda: time.time() + LATER).run_once()
    assert report.orphans == 1 and report.bytes == 64
    assert not store.exists(old)
    assert all(store.exists(k) for k in ns.keys)  # committed objects are never orphans
    assert Reclaimer(store, grace_period=0).run_once().orphans == 0


def test_bad_arguments():
    with pytest.raises(ValueError):
        Reclaimer(MemoryStore("x"), grace_period=-1)
    with pytest.raises(ValueError):
        Reclaimer(MemoryStore("x")).run_forever(0)


def test_run_forever_stops(store):
    import threading

    filled(store, versions=2)
    record_watermark(store, "ck", cursor(4))
    stop = threading.Event()
    thread = threading.Thread(target=Reclaimer(store).run_forever, args=(0.01,), kwargs={"stop": stop})
    thread.start()
    deadline = time.monotonic() + 10
    while Manifest(store).gc_boundary().step == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert Manifest(store).gc_boundary().step == 4  # the watermark itself (inside version 2)


def scenario(store) -> Namespace:
    ns = filled(store, versions=8, per_version=2)
    ns.orphan()
    for step in (5, 9, 12):
        record_watermark(store, f"ck-{step}", cursor(step))
    retire(store, "ck-5")
    return ns


def metadata_names(keys: list[str]) -> list[str]:
    """The metadata keys, a producers' bucket named without the commit token in its name (random per run)."""
    return sorted(k.rsplit("-", 1)[0] if k.startswith("_tgb/producers/") else k for k in keys if not k.startswith("data/"))


@pytest.mark.parametrize("keys", ["no-dataset", "spread"])
def test_killed_at_every_point_then_rerun_is_consistent(keys):
    """Kill after each possible number of writes/deletes; the namespace stays readable and a rerun finishes."""
    reference = create_namespace(MemoryStore(f"ref-{uuid.uuid4().hex}"), keys)
    ref_ns = scenario(reference)
    Reclaimer(reference, clock=lambda: time.time() + LATER).run_once()
    expected = reference.list()
    budget = 0
    while True:
        store = create_namespace(MemoryStore(f"kill-{uuid.uuid4().hex}"), keys)
        ns = scenario(store)
        try:
            Reclaimer(KillAfter(store, budget), clock=lambda: time.time() + LATER).run_once()
            finished = True
        except StorageError:
            finished = False
        for step in (9, 12):  # live checkpoints resume from a half-done pass
            assert_resumable(store, step, ns.keys)
        Reclaimer(store, clock=lambda: time.time() + LATER).run_once()
        assert metadata_names(store.list()) == metadata_names(expected)
        assert len([k for k in store.list("data/")]) == len([k for k in expected if k.startswith("data/")])
        assert_resumable(store, 9, ns.keys)
        store.destroy()
        if finished:
            break
        budget += 1
    assert budget > 10  # the pass really had many points to die at
    assert ref_ns.num_steps == 16
    reference.destroy()
