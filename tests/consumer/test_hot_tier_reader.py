"""Readers with a hot tier (``ReaderOptions(cache_dir=...)``): second epochs, shared nodes, reclamation, full disks."""

from __future__ import annotations

import errno
import logging
import multiprocessing as mp
import uuid

import pytest
import torch
from _support import LAYOUT, make_batch, produce

import torch_tgb as tgb
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.storage import LatencyStore, LocalStore, MemoryStore
from torch_tgb.testing.counting import CountingStore

MESHES = [tgb.Mesh(dp, 2, cp, 2) for dp in range(2) for cp in range(2)]


def _check(batches, mesh, n):
    assert len(batches) == n
    for step, batch in enumerate(batches):
        want = LAYOUT.cut(make_batch(step))[mesh.dp_rank * LAYOUT.cp + mesh.cp_rank].tensors
        assert all(torch.equal(batch[k], want[k]) for k in want), step


@pytest.fixture
def remote():
    inner = MemoryStore(f"hot-reader-{uuid.uuid4().hex}")
    produce(inner, 6)
    yield CountingStore(inner)
    inner.destroy()


def test_a_second_epoch_reads_nothing_from_the_store(remote, tmp_path):
    options = ReaderOptions(cache_dir=str(tmp_path / "cache"), cache_bytes=1 << 24)
    for mesh in MESHES:
        _check(list(tgb.TGBDataset(remote, mesh=mesh, options=options)), mesh, 6)
    first = remote.range_reads("data/")
    assert first >= 6 * len(MESHES)  # at least one range read per rank-step
    for mesh in MESHES:  # a new reader (a new process, a new epoch): footers and slices from the tier
        _check(list(tgb.TGBDataset(remote, mesh=mesh, options=options)), mesh, 6)
    assert remote.range_reads("data/") == first


def test_an_uncached_reader_reads_every_step_again(remote):
    mesh = MESHES[0]
    list(tgb.TGBDataset(remote, mesh=mesh))
    first = remote.range_reads("data/")
    list(tgb.TGBDataset(remote, mesh=mesh))
    assert remote.range_reads("data/") >= 2 * first - 1


def _read_all(store, mesh, cache_dir, results):  # type: ignore[no-untyped-def]
    try:
        options = ReaderOptions(cache_dir=cache_dir, cache_bytes=1 << 24)
        batches = list(tgb.TGBDataset(store, mesh=mesh, options=options))
        _check(batches, mesh, 6)
        results.put("ok")
    except BaseException as e:
        results.put(repr(e))


def test_two_reader_processes_share_one_cache_dir(tmp_path):
    root = tmp_path / "ns"
    produce(str(root), 6)
    remote = LatencyStore(LocalStore(root), rtt=0.002, bandwidth=0)  # a remote-like store: no local path
    cache_dir = str(tmp_path / "cache")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    # two processes of one node, each reading two ranks' slices (the footers of every step are shared)
    procs = [ctx.Process(target=_read_all, args=(remote, mesh, cache_dir, results)) for mesh in MESHES[:2] * 2]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    assert outcomes == ["ok"] * len(procs)
    counted = CountingStore(remote)
    for mesh in MESHES[:2]:
        _check(list(tgb.TGBDataset(counted, mesh=mesh, options=ReaderOptions(cache_dir=cache_dir))), mesh, 6)
    assert counted.range_reads("data/") == 0


def test_a_reclaimed_step_is_never_served_from_the_tier(tmp_path):
    inner = MemoryStore(f"hot-reclaim-{uuid.uuid4().hex}")
    try:
        produce(inner, 6)
        mesh = MESHES[0]
        options = ReaderOptions(cache_dir=str(tmp_path / "cache"), cache_bytes=1 << 24)
        ds = tgb.TGBDataset(inner, mesh=mesh, options=options)
        it = iter(ds)
        for _ in range(4):
            next(it)
        state = ds.state_dict()  # at step 4
        list(it)  # every step's slice is now in the tier
        start = tgb.TGBDataset(inner, mesh=mesh).state_dict()  # a checkpoint at step 0, then retired
        tgb.checkpoint.record_watermark(inner, checkpoint_id="ckpt-4", state=state)
        report = tgb.Reclaimer(inner, grace_period=0.0).run_once()
        assert report.objects > 0 and report.boundary_step > 0, report
        outcomes = []
        for opts in (ReaderOptions(), options):  # uncached, then with the tier holding the reclaimed bytes
            old = tgb.TGBDataset(inner, mesh=mesh, options=opts)
            old.load_state_dict(start)
            with pytest.raises(tgb.TGBError) as info:
                next(iter(old))
            outcomes.append(type(info.value))
        assert outcomes[0] is outcomes[1]  # the manifest refuses the step, with or without the tier
        resumed = tgb.TGBDataset(inner, mesh=mesh, options=options)
        resumed.load_state_dict(state)
        assert len(list(resumed)) == 2  # above the boundary: served as before
    finally:
        inner.destroy()


def test_a_full_cache_disk_never_fails_a_step(remote, tmp_path, monkeypatch, caplog):
    import torch_tgb.storage.hot_tier as hot_tier

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hot_tier.os, "replace", full)
    options = ReaderOptions(cache_dir=str(tmp_path / "cache"), cache_bytes=1 << 24)
    with caplog.at_level(logging.WARNING, logger="torch_tgb.storage.hot_tier"):
        _check(list(tgb.TGBDataset(remote, mesh=MESHES[1], options=options)), MESHES[1], 6)
    assert any("No space left" in r.getMessage() for r in caplog.records)


def test_bytes_cached_corrupt_are_dropped_and_read_again_from_the_store(remote, tmp_path):
    """Bytes corrupted on their way into the tier fail their CRC once: the reader drops them and reads the origin."""
    import os

    from torch_tgb.storage.hot_tier import HotTierStore

    cache = str(tmp_path / "cache")
    options = ReaderOptions(cache_dir=cache, cache_bytes=1 << 24)
    mesh = MESHES[0]
    _check(list(tgb.TGBDataset(remote, mesh=mesh, options=options)), mesh, 6)  # fills the tier
    tier = HotTierStore(remote, cache_dir=cache, cache_bytes=1 << 24)
    damaged = 0
    for key in remote.list("data/"):
        prefix = tier.entry_path(key, 0, 0)[: -len("-0-0")] + "-"
        folder = os.path.dirname(prefix)
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            path = os.path.join(folder, name)
            if not path.startswith(prefix):
                continue
            start, end = (int(x) for x in name.rsplit("-", 2)[1:])
            good = remote.get_range(key, start, end)
            bad = bytes([good[-1] ^ 0xFF]) if end - start == 1 else good[:-1] + bytes([good[-1] ^ 0xFF])
            assert tier.fill(key, start, end, bad)  # filed as if it had arrived so: its tier checksum matches
            damaged += 1
    assert damaged
    before = remote.range_reads("data/")
    _check(list(tgb.TGBDataset(remote, mesh=mesh, options=options)), mesh, 6)  # the right bytes, from the store
    assert remote.range_reads("data/") > before
    again = remote.range_reads("data/")
    _check(list(tgb.TGBDataset(remote, mesh=mesh, options=options)), mesh, 6)  # and the tier holds them now
    assert remote.range_reads("data/") == again
