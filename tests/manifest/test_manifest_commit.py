"""The commit protocol: conflicts and rebase, lost acknowledgements, fencing, GC boundary, seal."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest
from _manifest_helpers import HookStore, commit, entries, offsets_in_log, reclaim_to, started

from torch_tgb.errors import AmbiguousWriteError, FencedError, ManifestError
from torch_tgb.manifest import Committer, Manifest
from torch_tgb.manifest.keys import epoch_key
from torch_tgb.storage import FaultyStore, ForwardingStore, MemoryStore, ObjectStore

from tests._key_layouts import KEY_LAYOUTS, create_namespace


@pytest.fixture(params=KEY_LAYOUTS)
def store(request) -> MemoryStore:
    s = create_namespace(MemoryStore(f"commit-{uuid.uuid4().hex}"), request.param)
    yield s
    s.destroy()


def test_conflict_then_rebase(store) -> None:
    a, b = started(store, "a"), started(store, "b")  # registered: no version written
    result = a.attempt(entries("a", 0, 3))
    assert result.committed and result.version == 1
    # a stale b writes into slot 2: conflict, nothing written
    b_view = b.view.version
    assert b_view == 0
    # b refreshes inside attempt, so to force a conflict let a commit between b's read and write
    store_put = b.store.put_if_absent

    def racing_put(key, data):
        b.store.put_if_absent = store_put
        commit(a, 1)  # a takes the slot b is about to write
        return store_put(key, data)

    b.store.put_if_absent = racing_put  # type: ignore[method-assign]
    lost = b.attempt(entries("b", 0, 2))
    assert (lost.committed, lost.conflict, lost.version) == (False, True, 2)
    won = b.attempt(entries("b", 0, 2))  # rebases on version 2
    assert won.committed and won.version == 3
    m = Manifest(store)
    assert [(e.producer, e.offset) for e in m.entries(0, 10)] == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)]


def test_concurrent_committers_exactly_once(store) -> None:
    n_producers, per = 6, 40

    def run(pid: str) -> None:
        c = started(store, pid)
        offset = 0
        while offset < per:
            batch = entries(pid, offset, min(3, per - offset))
            if c.attempt(batch).committed:
                offset = c.next_offset

    threads = [threading.Thread(target=run, args=(f"p{i}",)) for i in range(n_producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen = offsets_in_log(store)
    assert set(seen.values()) == {1}
    assert sorted(seen) == sorted((f"p{i}", o) for i in range(n_producers) for o in range(per))


class LandsButSaysFalse(ForwardingStore):
    """The put lands, the reply is lost, and the client's retry sees 412 (False)."""

    def __init__(self, inner: ObjectStore, times: int = 1) -> None:
        super().__init__(inner)
        self.times = times

    def put_if_absent(self, key, data):
        created = self.inner.put_if_absent(key, data)
        if created and key.startswith("_tgb/log/") and self.times > 0:
            self.times -= 1
            return False
        return created



def test_lost_ack_412_recognised_by_token(store) -> None:
    c = started(store, "p0")
    c.store = LandsButSaysFalse(store)  # type: ignore[assignment]
    result = c.attempt(entries("p0", 0, 3))
    assert result.committed and result.recognised and result.version == 1
    assert c.attempt(entries("p0", 0, 3)).wrote is False  # nothing left to write
    assert offsets_in_log(store) == Counter({("p0", o): 1 for o in range(3)})


def test_lost_ack_ambiguous_recognised(store) -> None:
    faulty = FaultyStore(store)
    c = Committer(Manifest(faulty), "p0")
    c.start()
    faulty.fail_next("put_if_absent", 1, "lost_ack")  # lands, caller sees AmbiguousWriteError
    result = c.attempt(entries("p0", 0, 2))
    assert result.committed and result.recognised
    faulty.fail_next("put_if_absent", 1, "timeout")  # does not land: same bytes retried into the same slot
    result = c.attempt(entries("p0", 2, 2))
    assert result.committed and result.version == 2 and not result.recognised
    assert offsets_in_log(store) == Counter({("p0", o): 1 for o in range(4)})


def test_lost_ack_then_conflict_recognised_on_next_attempt(store) -> None:
    """The ack is lost and the read-back fails too; the next refresh finds our token."""
    c = started(store, "p0")
    original = c.manifest.try_read_version
    faulty = FaultyStore(store)
    c.store = faulty  # type: ignore[assignment]
    faulty.fail_next("put_if_absent", 1, "lost_ack")
    calls = {"raised": 0}

    def blind_read(number):
        found = original(number)
        if found is not None and not calls["raised"]:  # the read-back right after the ambiguous write
            calls["raised"] += 1
            raise AmbiguousWriteError("simulated: read-back timed out too")
        return found

    c.manifest.try_read_version = blind_read  # type: ignore[method-assign]
    with pytest.raises(AmbiguousWriteError):
        c.attempt(entries("p0", 0, 2))
    c.manifest.try_read_version = original  # type: ignore[method-assign]
    again = c.attempt(entries("p0", 0, 2))  # same attempt group: the refresh finds our token
    assert again.committed and again.recognised and not again.wrote
    assert offsets_in_log(store) == Counter({("p0", 0): 1, ("p0", 1): 1})


def test_fenced_incarnation_never_commits(store) -> None:
    old = started(store, "p0")
    commit(old, 2)
    new = started(store, "p0")  # epoch bump
    assert new.epoch == old.epoch + 1 and new.next_offset == 2
    with pytest.raises(FencedError, match="producer_id='p0' epoch=1 is fenced"):
        old.attempt(entries("p0", 2, 2))
    with pytest.raises(FencedError):
        old.attempt(entries("p0", 2, 2))
    commit(new, 1)
    m = Manifest(store)
    bump = next(v for v in range(1, m.latest_version() + 1) if m.read_version(v).producers.get("p0", None)
                and m.read_version(v).producers["p0"].epoch == 2)
    after = [e for v in range(bump, m.latest_version() + 1) for e in m.read_version(v).entries]
    assert [(e.producer, e.offset) for e in after] == [("p0", 2)]  # only the new incarnation's entry
    assert offsets_in_log(store) == Counter({("p0", o): 1 for o in range(3)})


def test_simultaneous_starts_fence_one(store) -> None:
    a, b = Committer(Manifest(store), "p0"), Committer(Manifest(store), "p0")
    a.start()
    b.start()
    assert b.epoch == a.epoch + 1
    with pytest.raises(FencedError):
        a.attempt(entries("p0", 0, 1))


def test_commit_into_reclaimed_slot_is_detected(store) -> None:
    """A writer stalled at version v; versions up to the boundary are deleted; its create of v+1 'succeeds'."""
    other = started(store, "o", snapshot_every=1000)
    commit(other, 1)  # version 1
    stalled = started(store, "s", snapshot_every=1000)  # its view: version 1
    for _ in range(10):
        commit(other, 1)  # versions 2..11
    stalled_view = stalled.view.version
    assert stalled_view == 1
    m = Manifest(store)
    m.write_snapshot(8)
    m.advance_gc_boundary(8, m.read_version(8).first_step)
    m.delete_versions_below(8)
    assert not store.exists(Manifest(store).version_key(2))

    stalled._rate.rate = 0.0  # it saw nobody else commit: it probes for version 2 only (no hint)
    result = stalled.attempt(entries("s", 0, 2))  # reads 2: missing; creates 2: lands in a reclaimed slot
    assert result.reclaimed_slot and not result.committed and result.version == 2
    assert not store.exists(Manifest(store).version_key(2))  # undone
    result = stalled.attempt(entries("s", 0, 2))  # rebased on the boundary's snapshot
    assert result.committed and result.version == 12
    head = Manifest(store).head()
    assert head.producers["s"].next_offset == 2
    kept = Manifest(store)
    step0 = kept.read_version(8).first_step
    assert Counter((e.producer, e.offset) for e in kept.entries(step0, head.num_steps)) == Counter(
        {("o", o): 1 for o in range(step0, 11)} | {("s", 0): 1, ("s", 1): 1}
    )


def test_a_stalled_committer_that_expects_others_jumps_to_the_newest_version(store) -> None:
    """Format 2: with no rate yet (or others committing) a stalled committer starts its probe at the hint, so it
    never writes into a reclaimed slot: its first attempt lands after the newest version."""
    other = started(store, "o", snapshot_every=1000)
    commit(other, 1)  # version 1
    stalled = started(store, "s", snapshot_every=1000)  # its view: version 1
    for _ in range(10):
        commit(other, 1)  # versions 2..11
    m = Manifest(store)
    m.write_snapshot(8)
    m.advance_gc_boundary(8, m.read_version(8).first_step)
    m.delete_versions_below(8)
    result = stalled.attempt(entries("s", 0, 2))
    assert result.committed and not result.reclaimed_slot and result.version == 12


def test_seal_stops_everyone(store) -> None:
    a, b = started(store, "a"), started(store, "b")
    commit(a, 2)
    sealed = a.attempt(entries("a", 2, 1), seal=True)
    assert sealed.committed and Manifest(store).head().sealed
    with pytest.raises(ManifestError, match="sealed at version=2"):
        b.attempt(entries("b", 0, 1))
    assert a.attempt([]).committed  # nothing to do after the seal is fine
    with pytest.raises(ManifestError, match="sealed"):
        started(store, "c")


def test_gap_in_offsets_refused(store) -> None:
    c = started(store, "p0")
    with pytest.raises(ValueError, match="next_offset is 0"):
        c.attempt(entries("p0", 1, 2))


def test_snapshot_failure_does_not_fail_commit(store) -> None:
    from torch_tgb.errors import TransientStorageError
    from torch_tgb.manifest.keys import SNAPSHOT_PREFIX
    from torch_tgb.storage._wrapper import ForwardingStore

    class SnapshotsFail(ForwardingStore):
        failed = 0

        def put(self, key, data):
            if key.startswith(SNAPSHOT_PREFIX):  # transient, no retry wrapper here
                self.failed += 1
                raise TransientStorageError(f"injected: put {key}")
            self.inner.put(key, data)

    faulty = SnapshotsFail(store)
    c = Committer(Manifest(faulty, snapshot_every=2), "p0")
    c.start()
    assert c.attempt(entries("p0", 0, 1)).committed  # version 1
    assert faulty.failed == 0
    assert c.attempt(entries("p0", 1, 1)).committed  # version 2: snapshot attempted and failed
    assert faulty.failed == 1
    assert Manifest(store).head().num_steps == 2


def test_commit_that_becomes_the_boundary_is_kept(store) -> None:
    """B9: a reclamation right after our create makes our version the boundary: it is ours, keep it."""
    c = started(store, "p0")
    commit(c, 2)
    target = c.view.version + 1
    key = Manifest(store).version_key(target)
    c.store = HookStore(store, "put_if_absent", lambda k: k == key,  # type: ignore[assignment]
                        lambda: reclaim_to(store, target))
    result = c.attempt(entries("p0", 2, 2))
    assert c.store.fired and result.committed and result.version == target
    assert store.exists(Manifest(store).version_key(target))
    assert c.attempt(entries("p0", 4, 1)).version == target + 1  # the chain goes on from there
    m = Manifest(store)
    assert m.head().producers["p0"].next_offset == 5
    assert [e.offset for e in m.entries(m.gc_boundary().step, 5)] == [2, 3, 4]


def test_commit_reclaimed_past_right_after_create_counts_as_committed(store) -> None:
    """Our version is legit but others commit on top and a reclamation moves the boundary past it."""
    a, b = started(store, "a"), started(store, "b")
    a.refresh()
    target = a.view.version + 1

    def others_then_reclaim() -> None:
        for _ in range(3):
            commit(b, 1)
        reclaim_to(store, target + 2)

    key = Manifest(store).version_key(target)
    a.store = HookStore(store, "put_if_absent", lambda k: k == key,  # type: ignore[assignment]
                        others_then_reclaim)
    result = a.attempt(entries("a", 0, 2))
    assert result.committed and not result.reclaimed_slot
    assert a.next_offset == 2  # view restarted from the boundary's snapshot
    commit(a, 1)
    head = Manifest(store).head()
    assert head.producers["a"].next_offset == 3 and head.producers["b"].next_offset == 3


def test_zombie_stalled_past_a_reclamation_is_fenced(store) -> None:
    """The first commit of a newer incarnation is reclaimed away: the old one learns of it from the snapshot."""
    old = started(store, "p0", snapshot_every=1000)
    commit(old, 2)
    new = started(store, "p0")  # epoch 2
    commit(new, 1)  # epoch 2 in the log
    other = started(store, "o")
    for _ in range(5):
        commit(other, 1)
    reclaim_to(store, other.view.version - 1)  # new's first commit is gone, only the snapshot knows
    store.delete(epoch_key("p0", 2))  # (and the registration: so the snapshot is what fences)
    with pytest.raises(FencedError, match="epoch=1 is fenced: manifest version=.* holds epoch=2"):
        old.attempt(entries("p0", 2, 3))
    m = Manifest(store)
    head = m.head()
    assert head.producers["p0"].epoch == 2 and head.producers["p0"].next_offset == 3
    assert [e.producer for e in m.entries(m.gc_boundary().step, head.num_steps)] == ["o"] * (head.num_steps - m.gc_boundary().step)
    assert any(new.attempt(entries("p0", 3, 1)).committed for _ in range(3))  # new was stale too: it rebases


def test_candidate_that_readers_would_refuse_is_never_written(store) -> None:
    c = started(store, "p0")
    commit(c, 2)
    bad = [entries("p0", 2, 1)[0], entries("p0", 5, 1)[0]]  # a gap inside one version
    with pytest.raises(ManifestError, match="consecutive|offset"):
        c.attempt(bad)
    assert Manifest(store).head().num_steps == 2
