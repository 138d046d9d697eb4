"""Registration outside the log (docs/protocol.md, *Registering*): one created-once object per incarnation.

Fencing of a zombie, two incarnations racing to register, a lost or missing
acknowledgement of the claim, a restart, the one version a zombie may land
after the claim (its check preceded it), and the cost: N producers started
together write no version and one registration object each (counted, never timed).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import Counter

import pytest
from _manifest_helpers import HookStore, commit, entries, offsets_in_log, started

from torch_tgb.errors import CorruptObject, FencedError, NamespaceSealed
from torch_tgb.manifest import Committer, Manifest
from torch_tgb.manifest._epochs import claimant
from torch_tgb.manifest.keys import EPOCH_PREFIX, LOG_PREFIX, epoch_key
from torch_tgb.storage import FaultyStore, MemoryStore
from torch_tgb.testing.counting import CountingStore

from tests._key_layouts import create_namespace


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore(f"register-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def test_registration_writes_one_object_and_no_version(store) -> None:
    c = started(store, "p0")
    assert c.epoch == 1 and store.list(EPOCH_PREFIX) == [epoch_key("p0", 1)]
    assert Manifest(store).latest_version() == 0  # nothing in the log until the first commit
    commit(c, 2)
    head = Manifest(store).head()
    assert head.version == 1 and head.producers["p0"].epoch == 1  # the first commit puts the epoch in the log


def test_a_zombie_is_fenced_at_its_next_attempt_and_writes_nothing(store) -> None:
    old = started(store, "p0")
    commit(old, 2)
    new = started(store, "p0")
    assert (new.epoch, new.next_offset) == (2, 2)
    before = Manifest(store).latest_version()
    with pytest.raises(FencedError, match="producer_id='p0' epoch=1 is fenced: epoch=2 registered"):
        old.attempt(entries("p0", 2, 2))
    with pytest.raises(FencedError):  # for good
        old.attempt([], mark="closed")
    assert Manifest(store).latest_version() == before
    commit(new, 1)
    assert Manifest(store).head().producers["p0"].epoch == 2
    assert offsets_in_log(store) == Counter({("p0", o): 1 for o in range(3)})


def test_two_incarnations_racing_to_register_one_survives(store) -> None:
    """Both read the log (epoch 0) before either claims: one gets epoch 1, the other steps over it to 2."""
    late = Committer(Manifest(store), "p0")
    hooked = HookStore(store, "put_if_absent", lambda k: k == epoch_key("p0", 1), late.start)
    early = Committer(Manifest(hooked), "p0")
    early.start()  # its claim of epoch 1 runs, then the hook registers `late`, which finds 1 taken
    assert hooked.fired and (early.epoch, late.epoch) == (1, 2)
    with pytest.raises(FencedError, match="epoch=1 is fenced"):
        early.attempt(entries("p0", 0, 1))
    commit(late, 1)
    assert offsets_in_log(store) == Counter({("p0", 0): 1})


def test_a_lost_acknowledgement_of_the_claim_is_recognised(store) -> None:
    faulty = FaultyStore(store)
    faulty.fail_next("put_if_absent", 1, "lost_ack")  # the claim lands, the caller hears nothing definite
    c = Committer(Manifest(faulty), "p0")
    c.start()
    assert c.epoch == 1 and store.list(EPOCH_PREFIX) == [epoch_key("p0", 1)]  # ours: not stepped over
    faulty.fail_next("put_if_absent", 1, "timeout")  # does not land: the same claim again
    again = Committer(Manifest(faulty), "p0")
    again.start()
    assert again.epoch == 2 and len(store.list(EPOCH_PREFIX)) == 2


def test_a_restart_resumes_from_the_log_with_a_new_epoch(store) -> None:
    first = started(store, "p0")
    commit(first, 3)
    assert first.attempt([], mark="closed").committed
    second = started(store, "p0")
    assert (second.epoch, second.next_offset) == (2, 3)
    commit(second, 2)
    third = started(store, "p0")  # a restart that never commits ...
    fourth = started(store, "p0")  # ... is stepped over by the next one
    assert (third.epoch, fourth.epoch, fourth.next_offset) == (3, 4, 5)
    commit(fourth, 1)
    head = Manifest(store).head()
    assert (head.producers["p0"].epoch, head.producers["p0"].next_offset) == (4, 6)
    assert offsets_in_log(store) == Counter({("p0", o): 1 for o in range(6)})


def test_a_zombie_checking_just_before_the_claim_lands_one_version_the_new_incarnation_rebases(store, caplog) -> None:
    """The zombie's check precedes the claim, its create follows the new incarnation's read: that one version
    lands (nothing else can: the next check sees the claim); the new incarnation's first commit drops its own
    entries for the offsets the zombie committed, says so, and fences the zombie in the log."""
    zombie = started(store, "p0")
    commit(zombie, 2)
    box: dict[str, Committer] = {}
    zombie.store = HookStore(store, "exists", lambda k: k == epoch_key("p0", 2),  # type: ignore[assignment]
                             lambda: box.setdefault("new", started(store, "p0")))
    assert zombie.attempt(entries("p0", 2, 3)).committed  # offsets 2..4, after the new incarnation registered
    new = box["new"]
    assert new.next_offset == 2  # what it read at registration
    with pytest.raises(FencedError):
        zombie.attempt(entries("p0", 5, 1))
    with caplog.at_level(logging.WARNING, logger="torch_tgb.manifest.commit"):
        result = new.attempt(entries("p0", 2, 4))  # re-produced 2..5: 2..4 are the zombie's
    assert result.committed and new.next_offset == 6
    assert any("committed up to offset 5 after this incarnation registered" in r.getMessage() for r in caplog.records)
    head = Manifest(store).head()
    assert head.producers["p0"].epoch == 2
    assert offsets_in_log(store) == Counter({("p0", o): 1 for o in range(6)})


def test_an_incarnation_writing_our_epoch_in_the_log_fences_us(store) -> None:
    """Older code bumps epochs in the log without registration objects: its epoch equal to ours, written
    with a token that is not ours, stops us (two incarnations never share an epoch unnoticed)."""
    ours = started(store, "p0")
    other = Committer(Manifest(store), "p0")
    other._reset_view()
    other.epoch = 1  # what an older torch_tgb's bump to epoch 1 would give it
    commit(other, 1)
    with pytest.raises(FencedError, match="epoch=1 written by another incarnation"):
        ours.attempt(entries("p0", 1, 1))


def test_a_malformed_registration_object_is_refused(store) -> None:
    store.put(epoch_key("p0", 1), json.dumps({"format": "tgb-epoch/1", "producer": "p1", "epoch": 1,
                                              "token": "x"}).encode())
    with pytest.raises(CorruptObject, match="not the registration of producer 'p0' epoch=1"):
        started(store, "p0")
    store.put(epoch_key("p0", 1), b"not json")
    with pytest.raises(CorruptObject, match="is not a registration object"):
        claimant(store, "p0", 1)


def test_a_registered_producer_holds_the_seal_of_a_namespace_without_a_job(store) -> None:
    a, b = started(store, "a"), started(store, "b")
    commit(a, 1)
    assert a.attempt([], mark="done").committed
    assert not Manifest(store).head().sealed  # b registered and has not committed: it may still
    commit(b, 1)
    assert b.attempt([], mark="done").committed and Manifest(store).head().sealed
    with pytest.raises(NamespaceSealed):
        started(store, "c")


def _register_together(n: int) -> CountingStore:
    inner = create_namespace(MemoryStore(f"register-{uuid.uuid4().hex}"), "spread")  # as producers create it
    store = CountingStore(inner)
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            committer = Committer(Manifest(store), f"p{i:03d}")
            barrier.wait()
            committer.start()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Manifest(inner).latest_version() == 0 and not inner.list(LOG_PREFIX)
    assert len(inner.list(EPOCH_PREFIX)) == n
    inner.destroy()
    if errors:
        raise errors[0]
    return store


def test_producers_registering_together_cost_a_constant_number_of_requests_each() -> None:
    """64 producers started at once: one conditional create each (no slot to contend for), and the same
    handful of reads each as one producer alone (before: O(N) bump attempts, each a version)."""
    alone = _register_together(1)
    together = _register_together(64)
    assert together.calls["put_if_absent"] == 64
    assert together.total == 64 * alone.total, (together.total, alone.total)
    assert alone.total <= 8, alone.calls


def test_registrations_count_as_manifest_requests() -> None:
    from torch_tgb.testing.counting import MANIFEST_CLASSES, key_class

    assert key_class(epoch_key("p0", 3)) == "epochs" and "epochs" in MANIFEST_CLASSES
