"""The Reclaimer's rule for uncommitted objects: deleted only when the manifest proves they can never be committed.

Issue 13 item 1: a producer stalled between its existence check and its
conditional create longer than the grace period (or a Reclaimer whose clock
runs ahead) used to have its object deleted as an orphan, then committed the
dangling key. Here the stall is a crash hook that blocks the committer thread
at ``before_commit``; the SIGSTOP version in a separate process is in
``tests/chaos/test_stall_reclaim.py``.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.checkpoint._orphans import Fate, fate_of
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import object_name, parse_object_name
from torch_tgb.manifest.records import ManifestState, ProducerState
from torch_tgb.producer import ProducerConfig
from torch_tgb.storage import LocalStore

pytestmark = pytest.mark.timeout(120)

LAYOUT = tgb.Layout(dp=1)
SKEW = 4000.0  # the clock skew: more than the default grace period


def batch(offset: int) -> dict[str, torch.Tensor]:
    return {"x": torch.full((1, 3), float(offset))}


class Stall:
    """A crash hook that blocks the committer at ``before_commit`` once armed, until released."""

    def __init__(self) -> None:
        self.armed = False
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self, point: str) -> None:
        if self.armed and point == "before_commit":
            self.armed = False
            self.reached.set()
            assert self.release.wait(60), "test never released the stalled committer"


def read_all(store: LocalStore) -> list[float]:
    ds = tgb.TGBDataset(store, mesh=tgb.Mesh(0, 1), timeout=30)
    return [float(b["x"][0, 0]) for b in ds]


@pytest.mark.parametrize("clock", ["grace_zero", "skewed"])
def test_stalled_commit_keeps_its_object(tmp_path, clock: str) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    stall = Stall()
    p = tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive",
                     config=ProducerConfig(crash_hook=stall))
    p.append(batch(0), offset=0)
    p.flush()
    stall.armed = True
    p.append(batch(1), offset=1)
    assert stall.reached.wait(30)
    if clock == "grace_zero":
        rec = tgb.Reclaimer(store, grace_period=0)
    else:  # production grace, the Reclaimer's clock far ahead of the object's mtime
        rec = tgb.Reclaimer(store, clock=lambda: time.time() + SKEW)
    report = rec.run_once()
    assert report.orphans == 0 and report.live_orphans == 1
    stall.release.set()
    p.close(seal=True)
    assert read_all(store) == [0.0, 1.0]


def test_dead_orphans_are_deleted_live_ones_kept(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        p.append(batch(0), offset=0)
        p.append(batch(1), offset=1)
        p.flush()
        epoch = p.epoch
    committed = {e.key for e in Manifest(store).entries(0, 2)}
    fenced = object_name("p0", epoch - 1, 5, "00000001")  # an older incarnation: fenced
    redone = object_name("p0", epoch, 1, "00000002")  # offset 1 was committed by another object
    pending = object_name("p0", epoch, 2, "00000003")  # the live incarnation's next offset
    future = object_name("p0", epoch + 1, 2, "00000004")  # an epoch the log has not seen
    stranger = object_name("q9", 1, 0, "00000005")  # a producer the log has not seen
    for key in (fenced, redone, pending, future, stranger):
        store.put(key, b"x")
    report = tgb.Reclaimer(store, grace_period=0).run_once()
    left = set(store.list("data/"))
    assert report.orphans == 2 and report.live_orphans == 3
    assert left == committed | {pending, future, stranger}


def test_old_dead_orphan_waits_for_grace(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        p.append(batch(0), offset=0)
    store.put(object_name("p0", 1, 0, "0000000a"), b"x")  # offset 0 is committed: dead
    assert tgb.Reclaimer(store).run_once().orphans == 0  # dead, but younger than the grace period
    assert tgb.Reclaimer(store, clock=lambda: time.time() + SKEW).run_once().orphans == 1


def test_fence_producer_makes_orphans_of_a_vanished_producer_deletable(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        p.append(batch(0), offset=0)
        epoch = p.epoch
    lost = object_name("p0", epoch, 1, "0000000b")  # written, then the producer vanished before its commit
    store.put(lost, b"x")
    rec = tgb.Reclaimer(store, grace_period=0)
    assert rec.run_once().orphans == 0 and store.exists(lost)
    assert rec.fence_producer("p0") == epoch + 1
    assert rec.run_once().orphans == 1 and not store.exists(lost)
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        assert p.resume_offset == 1 and p.epoch == epoch + 2


def test_sealed_namespace_frees_every_orphan(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        p.append(batch(0), offset=0)
        epoch = p.epoch
        store.put(object_name("p0", epoch, 1, "0000000c"), b"x")
        p.close(seal=True)
    assert tgb.Reclaimer(store, grace_period=0).run_once().orphans == 1


def test_fate_rule() -> None:
    state = ManifestState(3, 10, False, {"p": ProducerState(epoch=4, next_offset=7, committed_at=0.0)})
    assert fate_of(state, object_name("p", 3, 9, "ab")) is Fate.DEAD
    assert fate_of(state, object_name("p", 4, 6, "ab")) is Fate.DEAD
    assert fate_of(state, object_name("p", 4, 7, "ab")) is Fate.LIVE
    assert fate_of(state, object_name("p", 5, 8, "ab")) is Fate.LIVE
    assert fate_of(state, object_name("x", 1, 0, "ab")) is Fate.LIVE
    assert fate_of(state, "data/junk.bin") is Fate.FOREIGN
    sealed = ManifestState(3, 10, True, state.producers)
    assert fate_of(sealed, object_name("p", 4, 7, "ab")) is Fate.DEAD
    assert parse_object_name(object_name("p-1.x", 12, 345, "deadbeef")) == ("p-1.x", 12, 345)


def test_a_zombie_racing_a_registration_keeps_the_object_it_may_still_commit(tmp_path) -> None:
    """Epoch e stalled after its registration check, before its create; e+1 registers; the Reclaimer keeps e's
    object (the log does not know e+1 yet: e may still commit it, and does: its check preceded the registration);
    e's next attempt is fenced; e+1's first commit puts its epoch in the log, and from then on e's objects are dead."""
    store = LocalStore(tmp_path / "ns", fsync=False)
    stall = Stall()
    zombie = tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive",
                          config=ProducerConfig(crash_hook=stall))
    stall.armed = True
    zombie.append(batch(0), offset=0)
    assert stall.reached.wait(30)
    doomed = store.list("data/")
    successor = tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive")  # registers epoch 2
    report = tgb.Reclaimer(store, grace_period=0).run_once()
    assert (report.orphans, report.live_orphans) == (0, 1) and all(store.exists(k) for k in doomed)
    stall.release.set()
    with pytest.raises(tgb.FencedError):
        zombie.close()
    successor.append(batch(0), offset=0)  # re-produced from its resume offset: the zombie's offset 0 stands
    successor.append(batch(1), offset=1)
    successor.close(seal=True)
    head = Manifest(store).head()
    assert (head.producers["p0"].epoch, head.producers["p0"].next_offset) == (2, 2)
    assert Manifest(store).entry(0).key in doomed
    report = tgb.Reclaimer(store, grace_period=0).run_once()
    assert report.orphans == 1  # the successor's own offset 0, dropped by its rebase
    assert all(store.exists(k) for k in doomed)  # committed by the zombie's one version: never an orphan
    assert read_all(store) == [0.0, 1.0]
