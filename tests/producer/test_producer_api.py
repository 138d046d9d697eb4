"""Producer in one process: append/flush/resume, exactly-once offsets, fencing, lost acks, reclaim, lag."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
import torch

from torch_tgb.manifest.watermarks import record_watermark
from torch_tgb.errors import FencedError, ManifestError, ObjectNotFound, SchemaMismatch, TGBError
from torch_tgb.format import read_footer, read_slice
from torch_tgb.layout import Layout
from torch_tgb.manifest import Manifest
from torch_tgb.producer import FixedPolicy, Producer, ProducerConfig
from torch_tgb.storage import (
    FaultPlan,
    FaultRates,
    FaultyStore,
    LocalStore,
    MemoryStore,
    ObjectStore,
    ensure_conditional_writes,
)

LAYOUT = Layout(dp=2, seq_keys=("input_ids",))


def batch(offset: int, seq: int = 8) -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.full((4, seq), offset, dtype=torch.int32),
        "weight": torch.ones(4, dtype=torch.float32) * offset,
    }


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore(f"producer-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def log_offsets(store: ObjectStore) -> list[tuple[str, int]]:
    m = Manifest(store)
    return [(e.producer, e.offset) for e in m.entries(0, m.head().num_steps)]


def produce(store: ObjectStore, pid: str, stop: int, **kwargs) -> Producer:
    with Producer(store, producer_id=pid, layout=LAYOUT, **kwargs) as p:
        for offset in range(p.resume_offset, stop):
            assert p.append(batch(offset), offset=offset)
    return p


@pytest.mark.parametrize("policy", ["naive", "fixed:4", "incr", "aimd", "dac"])
def test_append_flush_and_read_back(store, policy: str) -> None:
    p = produce(store, "p0", 12, commit_policy=policy)
    assert log_offsets(store) == [("p0", o) for o in range(12)]
    stats = p.stats()
    assert stats.pending == 0 and stats.committed_offsets == 12 and stats.appended == 12
    assert stats.successes >= 1 and stats.attempts >= stats.successes and stats.bytes_written > 0
    m = Manifest(store)
    entry = m.entry(7)
    assert entry.samples == 4 and entry.tokens == 32 and entry.key.startswith("data/p0/e000001-o000000000007-")
    footer = read_footer(store, entry.key, size=entry.size, footer_offset=entry.footer_offset,
                         footer_length=entry.footer_length)
    part = read_slice(store, entry.key, footer, footer.slice(1, 0))
    assert torch.equal(part["input_ids"], torch.full((2, 8), 7, dtype=torch.int32))


def test_resume_offset_and_skip(store) -> None:
    produce(store, "p0", 5)
    with Producer(store, producer_id="p0", layout=LAYOUT) as p:
        assert p.resume_offset == 5 and p.epoch == 2
        assert p.append(batch(3), offset=3) is False  # committed by the last incarnation: skipped
        with pytest.raises(ValueError, match="expected offset=5, got offset=7"):
            p.append(batch(7), offset=7)
        assert p.append(batch(5)) is True  # offset defaults to the next one
        assert p.stats().skipped == 1
    assert log_offsets(store) == [("p0", o) for o in range(6)]


def test_uncommitted_objects_are_invisible_orphans(store) -> None:
    p = Producer(store, producer_id="p0", layout=LAYOUT, commit_policy=FixedPolicy(100))
    for offset in range(3):
        p.append(batch(offset))
    p.abort()  # crash-like: never committed
    assert len(store.list("data/p0/")) == 3 and log_offsets(store) == []
    with Producer(store, producer_id="p0", layout=LAYOUT) as again:
        assert again.resume_offset == 0  # starts over: nothing was visible
        for offset in range(3):
            again.append(batch(offset))
    assert log_offsets(store) == [("p0", o) for o in range(3)]


def test_schema_mismatch_at_start_and_append(store) -> None:
    produce(store, "p0", 2)
    with pytest.raises(SchemaMismatch, match="fingerprint .* disagrees with the namespace's"):
        Producer(store, producer_id="p1", layout=Layout(dp=4, seq_keys=("input_ids",)))
    with pytest.raises(SchemaMismatch, match="fingerprint"):
        Producer(store, producer_id="p1", layout=LAYOUT, schema={"input_ids": {"dtype": "int64", "shape": [8]}})
    with Producer(store, producer_id="p1", layout=LAYOUT) as p:
        with pytest.raises(SchemaMismatch, match="dtype"):
            p.append({"input_ids": torch.zeros(4, 8, dtype=torch.int64), "weight": torch.ones(4)})
        p.append(batch(0))
    assert sorted(log_offsets(store)) == [("p0", 0), ("p0", 1), ("p1", 0)]


def test_seal_and_sealed_namespace_refuses_producers(store) -> None:
    with Producer(store, producer_id="p0", layout=LAYOUT) as p:
        p.append(batch(0))
        p.close(seal=True)
        assert p.sealed
    assert Manifest(store).head().sealed
    with pytest.raises(ManifestError, match="sealed"):
        Producer(store, producer_id="p1", layout=LAYOUT)


def test_zombie_incarnation_is_fenced(store) -> None:
    old = Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive")
    for offset in range(3):
        old.append(batch(offset))
    old.flush()
    new = Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive")  # epoch bump
    assert new.resume_offset == 3 and new.epoch == old.epoch + 1
    old.append(batch(3))  # writes its object; its commit must fail
    with pytest.raises(FencedError, match="epoch=1 is fenced"):
        old.flush()
    with pytest.raises(FencedError):
        old.append(batch(4))
    assert old.stats().fenced == 1
    for offset in range(3, 6):
        new.append(batch(offset))
    new.close()
    with pytest.raises(FencedError):
        old.close()
    m = Manifest(store)
    entries = m.entries(0, m.head().num_steps)
    assert [e.offset for e in entries] == list(range(6))
    assert all(("-o%012d-" % e.offset) in e.key for e in entries)
    assert [e.key.split("/")[2][:7] for e in entries[3:]] == ["e000002"] * 3  # nothing of epoch 1 after the bump


def test_concurrent_producers_threads(store) -> None:
    errors: list[BaseException] = []

    def run(pid: str) -> None:
        try:
            produce(store, pid, 30, commit_policy="dac")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f"p{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    seen = Counter(log_offsets(store))
    assert set(seen.values()) == {1} and len(seen) == 180
    for pid in (f"p{i}" for i in range(6)):
        assert [o for p, o in log_offsets(store) if p == pid] == list(range(30))


def test_lost_acks_and_faults_no_duplicates_no_loss(store) -> None:
    """Every manifest create loses its acknowledgement or times out now and then."""
    plan = FaultPlan(seed=7, ops={"put_if_absent": FaultRates(lost_ack=0.3, timeout=0.2)})
    faulty = FaultyStore(store, plan)
    ensure_conditional_writes(store)  # the capability probe itself is not under test here
    for pid in ("a", "b"):
        with Producer(faulty, producer_id=pid, layout=LAYOUT, commit_policy="naive") as p:
            for offset in range(20):
                p.append(batch(offset))
        stats = p.stats()
        assert stats.recognised >= 1 and stats.committed_offsets == 20
    assert faulty.count("put_if_absent", "lost_ack") >= 5
    assert Counter(log_offsets(store)) == Counter({(pid, o): 1 for pid in ("a", "b") for o in range(20)})


def test_stalled_producer_commits_into_reclaimed_slot_then_rebases(store) -> None:
    """A producer paused while the Reclaimer deletes old versions: its create lands in a deleted slot."""
    gate, armed = threading.Event(), threading.Event()
    stalled_at: list[str] = []

    def hook(point: str) -> None:
        if point == "before_commit" and armed.is_set() and not gate.is_set():
            stalled_at.append(point)
            gate.wait(30)

    stalled = Producer(store, producer_id="s", layout=LAYOUT, commit_policy="naive",
                       config=ProducerConfig(crash_hook=hook))
    armed.set()  # after the epoch bump, which passes the same hook
    stalled.append(batch(0))  # its committer read up to the newest version, then stalls before the create
    while not stalled_at:
        time.sleep(0.01)
    produce(store, "o", 40, commit_policy="naive")  # 40+ versions by someone else
    m = Manifest(store)
    head = m.head()
    target = head.version - 2
    m.write_snapshot(target)
    m.advance_gc_boundary(target, m.read_version(target).first_step)
    assert m.delete_versions_below(target) > 30
    gate.set()  # the stalled create "succeeds" into a reclaimed slot; the boundary re-read catches it
    stalled.append(batch(1))
    stalled.close()
    stats = stalled.stats()
    assert stats.reclaimed_slots == 1 and stats.committed_offsets == 2
    after = Manifest(store)
    step0 = after.gc_boundary().step
    got = Counter((e.producer, e.offset) for e in after.entries(step0, after.head().num_steps))
    assert got[("s", 0)] == 1 and got[("s", 1)] == 1 and set(got.values()) == {1}
    assert after.head().producers["s"].next_offset == 2


def test_backpressure_blocks_append(store) -> None:
    gate, armed = threading.Event(), threading.Event()

    def hook(point: str) -> None:
        if point == "before_commit" and armed.is_set():
            gate.wait(30)

    p = Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive",
                 config=ProducerConfig(max_pending=3, crash_hook=hook))
    armed.set()
    done = threading.Event()

    def fill() -> None:
        for offset in range(6):
            p.append(batch(offset))
        done.set()

    t = threading.Thread(target=fill)
    t.start()
    time.sleep(0.3)
    assert not done.is_set() and p.stats().pending == 3
    gate.set()
    t.join(10)
    p.close()
    assert log_offsets(store) == [("p0", o) for o in range(6)]
    assert p.stats().paused_for_backpressure_s > 0


def test_max_lag_pauses_until_the_safe_boundary_moves(store) -> None:
    p = Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive", max_lag=4,
                 config=ProducerConfig(lag_poll_s=0.05, lag_poll_max_s=0.1))
    progress: list[int] = []

    def fill() -> None:
        for offset in range(8):
            p.append(batch(offset))
            progress.append(offset)

    t = threading.Thread(target=fill)
    t.start()
    deadline = time.monotonic() + 10
    while not p.stats().paused_for_lag and time.monotonic() < deadline:
        time.sleep(0.02)
    assert p.stats().paused_for_lag and p.paused
    assert progress == [0, 1, 2, 3]
    record_watermark(store, "ckpt-1", {"tgb_cursor": {"step": 4, "version": 0}})
    t.join(10)
    p.close()
    stats = p.stats()
    assert progress == list(range(8)) and not stats.paused_for_lag and stats.paused_for_lag_s > 0
    assert log_offsets(store) == [("p0", o) for o in range(8)]


def test_local_directory_and_fsync_store(tmp_path) -> None:
    store = LocalStore(tmp_path)
    produce(store, "p0", 5, commit_policy="fixed:2")
    produce(store, "p1", 3)
    assert Counter(log_offsets(store)) == Counter({("p0", o): 1 for o in range(5)} | {("p1", o): 1 for o in range(3)})


def test_errors_name_things(store) -> None:
    with pytest.raises(ValueError, match="producer_id"):
        Producer(store, producer_id="../x", layout=LAYOUT)
    with pytest.raises(TypeError):
        Producer(store, producer_id="p0", layout={"dp": 1})  # type: ignore[arg-type]
    p = Producer(store, producer_id="p0", layout=LAYOUT)
    p.close()
    with pytest.raises(TGBError, match="closed"):
        p.append(batch(0))


def test_transient_errors_in_the_committer_are_retried(store) -> None:
    faulty = FaultyStore(store)
    ensure_conditional_writes(store)
    with Producer(faulty, producer_id="p0", layout=LAYOUT, commit_policy="fixed:4") as p:
        p.append(batch(0))  # creates dataset.json
        faulty.fail_next("put_if_absent", 3, "error")  # 503s that escaped any retry wrapper
        for offset in range(1, 4):
            p.append(batch(offset))
        p.flush()
    assert faulty.count("put_if_absent", "error") == 3
    assert log_offsets(store) == [("p0", o) for o in range(4)]


def test_metadata_drift_fails_at_start(store) -> None:
    """B1: a producer whose metadata differs from dataset.json fails in its constructor."""
    with Producer(store, producer_id="p0", layout=LAYOUT, metadata={"vocab_size": 32000}) as p:
        p.append(batch(0))
    with pytest.raises(SchemaMismatch, match="metadata") as info:
        Producer(store, producer_id="p1", layout=LAYOUT, metadata={"vocab_size": 50000})
    assert Manifest(store).dataset().fingerprint in str(info.value)


def test_max_commit_delay_overrides_the_policy(store) -> None:
    """B11: fixed:100 with one entry would wait forever; max_commit_delay_s commits it anyway."""
    p = Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="fixed:100",
                 config=ProducerConfig(max_commit_delay_s=0.2))
    p.append(batch(0))
    deadline = time.monotonic() + 10
    while p.stats().committed_offsets < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert p.stats().committed_offsets == 1 and log_offsets(store) == [("p0", 0)]
    p.close()


def test_object_reclaimed_before_its_commit_fails_loud(store) -> None:
    """B11: an object deleted (as an orphan) before its commit is never committed as a dangling key."""
    p = Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="fixed:100",
                 config=ProducerConfig(verify_after_s=0.0))
    p.append(batch(0))
    store.delete(store.list("data/p0/"))  # a Reclaimer with too short a grace period
    with pytest.raises(ObjectNotFound, match="deleted before its commit"):
        p.flush()
    p.abort()
    assert log_offsets(store) == []
