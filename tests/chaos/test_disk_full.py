"""Disk full under a producer: a clear error, nothing half-committed, resume after space is freed.

``tmpfs``: a real 4 MiB tmpfs (needs root and mount; skipped otherwise) filled
with a ballast file. ``faulty``: a FaultyStore answering ENOSPC to puts, which
runs everywhere. Both check the same things.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.errors import StorageFull
from torch_tgb.format import read_footer
from torch_tgb.manifest import Manifest
from torch_tgb.storage import FaultyStore, LocalStore, ObjectStore, open_store

LAYOUT = tgb.Layout(dp=2)
ROW = 32 * 1024  # int32 values per row: 128 KiB per row, 512 KiB per batch


def batch(offset: int) -> dict[str, torch.Tensor]:
    return {"x": torch.full((4, ROW), offset, dtype=torch.int32)}


def _mounted(tmp_path, size: str) -> Iterator[str]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[str]:
    yield from _mounted(tmp_path, "4m")


@pytest.fixture
def tiny_tmpfs(tmp_path) -> Iterator[str]:
    yield from _mounted(tmp_path, "2m")


def _fill(root: str, leave: int) -> str:
    """A ballast file that leaves about ``leave`` bytes free on root's file system."""
    st = os.statvfs(root)
    free = st.f_bavail * st.f_frsize
    ballast = os.path.join(root, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return ballast


def _produce_until_full(store: ObjectStore, n: int) -> tuple[int, StorageFull]:
    p = None
    offset = Manifest(store).head().producers["p0"].next_offset
    try:  # a full disk may already refuse the start (its epoch-bump commit)
        p = tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive")
        while offset < n:
            p.append(batch(offset), offset=offset)
            p.flush()
            offset += 1
    except StorageFull as e:
        if p is not None:
            p.abort()
        return offset, e
    p.close()
    raise AssertionError(f"no StorageFull after {n} batches")


def _check_consistent(store: ObjectStore) -> int:
    """Every committed step's object exists and parses; no temp file is visible. Returns steps."""
    m = Manifest(store)
    head = m.head()
    for step, entry in enumerate(m.entries(0, head.num_steps)):
        assert entry.offset == step
        read_footer(store, entry.key, size=entry.size, footer_offset=entry.footer_offset,
                    footer_length=entry.footer_length)
    assert not [k for k in store.list() if ".tgb-tmp." in k]
    return head.num_steps


def _resume_and_read(store: ObjectStore, n: int) -> None:
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        start = p.resume_offset
        assert start == _check_consistent(store)
        for offset in range(start, n):
            p.append(batch(offset), offset=offset)
        p.close(seal=True)
    for rank in range(2):
        ds = tgb.TGBDataset(store, mesh=tgb.Mesh(rank, 2), timeout=10)
        assert [int(b["x"][0, 0]) for b in ds] == list(range(n))


def test_disk_full_on_tmpfs(tmpfs: str) -> None:
    root = os.path.join(tmpfs, "ns")
    store = open_store(root)
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        p.append(batch(0), offset=0)
    ballast = _fill(tmpfs, leave=1200 * 1024)  # room for about two batches
    stopped_at, error = _produce_until_full(store, 20)
    assert 1 <= stopped_at < 20
    assert "full" in str(error) and "data/p0/" in str(error) or "_tgb/" in str(error)
    committed = _check_consistent(store)
    assert committed <= stopped_at
    leftovers = [f for _, _, files in os.walk(root) for f in files if f.startswith(".tgb-tmp.")]
    assert not leftovers, f"temporary files left behind on a full disk: {leftovers}"
    os.unlink(ballast)
    _resume_and_read(store, 5)


@pytest.mark.parametrize("op", ["put", "put_if_absent"])
def test_disk_full_injected(tmp_path, op: str) -> None:
    """ENOSPC on object writes (put) or on the commit itself (put_if_absent of a version)."""
    faulty = FaultyStore(LocalStore(str(tmp_path / "ns")))
    with tgb.Producer(faulty, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        for offset in range(3):
            p.append(batch(offset), offset=offset)
    faulty.fail_next(op, 1000, "enospc")
    stopped_at, error = _produce_until_full(faulty, 10)
    assert stopped_at >= 3 and "full" in str(error)
    assert faulty.count(op, "enospc") >= 1
    committed = _check_consistent(faulty.inner)
    assert committed == 3 or (op == "put" and committed == 3)
    faulty._forced.clear()  # space freed
    _resume_and_read(faulty, 6)


# --- the Reclaimer on a full disk (issue 13 item 4) ---------------------------------------------

SMALL = 16 * 1024  # int32 values per batch: 64 KiB objects


def _small(offset: int) -> dict[str, torch.Tensor]:
    return {"x": torch.full((2, SMALL // 2), offset, dtype=torch.int32)}


def _namespace_with_a_killed_pass(store: ObjectStore) -> tuple[list[str], str]:
    """20 steps; a pass that moved the boundary to step 10 and died before deleting; a fenced orphan.

    Returns the object keys of steps 0..9 (deletable under the existing boundary) and the orphan's key.
    """
    from torch_tgb.checkpoint import record_watermark
    from torch_tgb.manifest import Committer
    from torch_tgb.manifest.keys import object_name

    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        for offset in range(20):
            p.append(_small(offset), offset=offset)
        epoch = p.epoch
    orphan = object_name("p0", epoch, 20, "0000beef")
    store.put(orphan, store.get(Manifest(store).entry(0).key))  # written, never committed
    newer = Committer(Manifest(store), "p0")
    newer.start()
    assert newer.attempt([], mark="closed").committed  # a newer incarnation's first commit: the orphan is dead
    record_watermark(store, "ck", {"tgb_cursor": {"step": 15, "version": 0}})
    manifest = Manifest(store)
    below = [e.key for e in manifest.entries(0, 10)]
    version = manifest.version_of_step(10)
    manifest.write_snapshot(version.number)
    manifest.advance_gc_boundary(version.number, 10)  # ... and the pass was killed here
    return below, orphan


def test_reclaimer_frees_space_on_a_full_disk_injected(tmp_path) -> None:
    """Every put fails with ENOSPC: the pass still deletes what the existing boundary allows, then fails."""
    from torch_tgb.checkpoint import Reclaimer

    faulty = FaultyStore(LocalStore(str(tmp_path / "ns"), fsync=False))
    below, orphan = _namespace_with_a_killed_pass(faulty)
    faulty.fail_next("put", 1000, "enospc")
    with pytest.raises(StorageFull, match="_tgb/snapshots/"):
        Reclaimer(faulty, grace_period=0).run_once()
    left = set(faulty.inner.list("data/"))
    assert not left & set(below), "objects below the existing GC boundary survived a pass on a full disk"
    assert orphan not in left, "a dead orphan survived a pass on a full disk"
    faulty._forced.clear()  # the freed space lets the next pass write its snapshot and boundary
    report = Reclaimer(faulty, grace_period=0).run_once()
    assert (report.boundary_step, report.objects) == (15, 5)
    assert len(faulty.inner.list("data/")) == 5
    ds = tgb.TGBDataset(faulty.inner, mesh=tgb.Mesh(0, 2), timeout=10)
    ds.load_state_dict({"tgb_cursor": {"step": 15, "version": 0}})
    assert [int(b["x"][0, 0]) for b in itertools.islice(ds, 5)] == list(range(15, 20))


def test_reclaimer_frees_space_on_a_full_tmpfs(tmpfs: str) -> None:
    from torch_tgb.checkpoint import Reclaimer

    store = LocalStore(os.path.join(tmpfs, "ns"))
    below, orphan = _namespace_with_a_killed_pass(store)
    ballast = _fill(tmpfs, leave=0)
    try:
        report = Reclaimer(store, grace_period=0).run_once()  # the deletes come first: room for the snapshot
        assert report.boundary_step == 15
    except StorageFull as e:  # not even then: the deletes must still have happened
        print(f"second phase still refused: {e}")
    left = set(store.list("data/"))
    assert not left & set(below) and orphan not in left
    os.unlink(ballast)
    report = Reclaimer(store, grace_period=0).run_once()
    assert report.boundary_step == 15 and len(store.list("data/")) == 5


def test_reclaimer_on_a_truly_full_tmpfs_before_any_boundary(tiny_tmpfs: str) -> None:
    """Issue 25: the boundary has not moved yet, so a pass must write before it may delete: the reserve makes room.

    Before the space reserve this pass freed 0 bytes and failed with
    ``StorageFull ... put '_tgb/snapshots/...'``, and so did every later one.
    """
    from torch_tgb.checkpoint import Reclaimer, record_watermark
    from torch_tgb.manifest.reserve import RESERVE_KEY

    store = LocalStore(os.path.join(tiny_tmpfs, "ns"))
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        for offset in range(4):
            p.append(_small(offset), offset=offset)
    record_watermark(store, "ck", {"tgb_cursor": {"step": 4, "version": 0}})  # a trainer checkpointed at step 4
    offset = 4
    p = tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="naive")
    with pytest.raises(StorageFull):
        while True:  # the producer runs until the disk is full
            p.append(_small(offset), offset=offset)
            p.flush()
            offset += 1
    p.abort()
    _fill(tiny_tmpfs, leave=0)  # and whatever a smaller write could still use: full to the last block
    committed = Manifest(store).head().num_steps
    report = Reclaimer(store, grace_period=0).run_once()
    assert report.reserve_released and report.boundary_step == 4
    assert report.objects == 4 and report.bytes > 0  # the four steps below the checkpoint are gone
    assert store.exists(RESERVE_KEY), "the reserve is written again once the deletes made room"
    ds = tgb.TGBDataset(store, mesh=tgb.Mesh(0, 2), timeout=10)
    ds.load_state_dict({"tgb_cursor": {"step": 4, "version": 0}})
    assert [int(b["x"][0, 0]) for b in itertools.islice(ds, committed - 4)] == list(range(4, committed))
