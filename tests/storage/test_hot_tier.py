"""The hot tier's own rules: what it caches, checked hits, atomic fills, LRU bound, a failing cache disk."""

from __future__ import annotations

import errno
import logging
import multiprocessing as mp
import os
import signal
import time
import uuid

import pytest

from torch_tgb.storage import HotTierStore, LocalStore, MemoryStore, RangeRequest, with_hot_tier
from torch_tgb.testing.counting import CountingStore
from torch_tgb.testing.store_contract import StoreContract

PAYLOAD = bytes(range(256)) * 64  # 16 KiB


@pytest.fixture
def remote():
    inner = MemoryStore(f"hot-{uuid.uuid4().hex}")
    inner.put("_tgb/dataset.json", b'{"id": 1}')
    inner.put("data/p0/a.tgb", PAYLOAD)
    yield CountingStore(inner)
    inner.destroy()


class TestHotTierContract(StoreContract):
    """Everything passes through or is served exactly as the store would."""

    race_processes = 0  # over a MemoryStore

    @pytest.fixture
    def store(self, tmp_path):
        inner = MemoryStore(f"hot-contract-{uuid.uuid4().hex}")
        yield HotTierStore(inner, tmp_path / "cache", cache_bytes=1 << 24)
        inner.destroy()


def test_immutable_ranges_are_read_once_mutable_keys_always(remote, tmp_path):
    cache = HotTierStore(remote, tmp_path, cache_bytes=1 << 20)
    for _ in range(3):
        assert cache.get_range("data/p0/a.tgb", 100, 4100) == PAYLOAD[100:4100]
        assert cache.get_range("_tgb/dataset.json", 0, 4) == b'{"id'
    assert remote.calls["get_range"] == 1 + 3  # one fill; the manifest side every time
    assert cache.counters["hits"] == 2 and cache.counters["fills"] == 1
    out = bytearray(4000)
    assert cache.get_range_into("data/p0/a.tgb", 100, memoryview(out)) == 4000 and bytes(out) == PAYLOAD[100:4100]
    results = cache.get_ranges([RangeRequest("data/p0/a.tgb", 100, 4100), RangeRequest("data/p0/a.tgb", 0, 10)])
    assert results == [PAYLOAD[100:4100], PAYLOAD[:10]]
    assert remote.calls["get_range"] == 5  # only the new range went to the store


def test_a_short_read_at_the_end_is_cached_as_short(remote, tmp_path):
    cache = HotTierStore(remote, tmp_path, cache_bytes=1 << 20)
    n = len(PAYLOAD)
    assert cache.get_range("data/p0/a.tgb", n - 5, n + 100) == PAYLOAD[-5:]
    assert cache.get_range("data/p0/a.tgb", n - 5, n + 100) == PAYLOAD[-5:]
    assert cache.counters["hits"] == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_a_damaged_entry_is_never_served(remote, tmp_path, damage):
    cache = HotTierStore(remote, tmp_path, cache_bytes=1 << 20)
    cache.get_range("data/p0/a.tgb", 0, 4096)
    path = cache.entry_path("data/p0/a.tgb", 0, 4096)
    raw = bytearray(open(path, "rb").read())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "flip":
        raw[17] ^= 0xFF
    else:
        raw = bytearray(b"x" * 3)
    open(path, "wb").write(raw)
    assert cache.get_range("data/p0/a.tgb", 0, 4096) == PAYLOAD[:4096]
    assert cache.counters["damaged"] == 1 and remote.calls["get_range"] == 2
    assert cache.get_range("data/p0/a.tgb", 0, 4096) == PAYLOAD[:4096]  # refilled, now a hit
    assert cache.counters["hits"] == 1


def _fill_and_hang(store, cache_dir, ready, stage):  # type: ignore[no-untyped-def]
    """A child that dies (SIGKILL from the parent) in the middle of a fill."""
    import torch_tgb.storage.hot_tier as hot_tier

    class Slow:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            half = memoryview(data)[: len(data) // 2]
            self.f.write(half)
            self.f.flush()
            ready.set()
            time.sleep(600)

    if stage == "write":
        real_open = open
        hot_tier.open = lambda path, mode="r", *a, **k: Slow(real_open(path, mode)) if "w" in mode else real_open(path, mode)
    else:  # the whole file written, not yet renamed onto the entry's name
        def hang(src, dst):
            ready.set()
            time.sleep(600)

        hot_tier.os.replace = hang
    HotTierStore(store, cache_dir, cache_bytes=1 << 20).get_range("data/p0/a.tgb", 0, 8192)


@pytest.mark.parametrize("stage", ["write", "rename"])
def test_sigkill_during_a_fill_leaves_no_trusted_entry(tmp_path, stage):
    root = tmp_path / "ns"
    local = LocalStore(root)
    local.put("_tgb/dataset.json", b"{}")
    local.put("data/p0/a.tgb", PAYLOAD)
    from torch_tgb.storage import LatencyStore

    remote = LatencyStore(local, rtt=0.0, bandwidth=0)  # remote-like: no local path
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_fill_and_hang, args=(remote, str(tmp_path / "cache"), ready, stage))
    child.start()
    assert ready.wait(60), "the child never reached its fill"
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    counted = CountingStore(remote)
    cache = HotTierStore(counted, tmp_path / "cache", cache_bytes=1 << 20)
    assert not os.path.exists(cache.entry_path("data/p0/a.tgb", 0, 8192))
    assert os.listdir(tmp_path / "cache" / "tmp")  # the dead fill's temporary file
    assert cache.get_range("data/p0/a.tgb", 0, 8192) == PAYLOAD[:8192]
    assert counted.calls["get_range"] == 1 and cache.counters["hits"] == 0


def test_a_full_cache_disk_degrades_to_uncached_reads_with_one_warning(remote, tmp_path, monkeypatch, caplog):
    import torch_tgb.storage.hot_tier as hot_tier

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hot_tier.os, "replace", full)
    cache = HotTierStore(remote, tmp_path, cache_bytes=1 << 20)
    with caplog.at_level(logging.WARNING, logger="torch_tgb.storage.hot_tier"):
        for i in range(5):
            assert cache.get_range("data/p0/a.tgb", i, i + 1000) == PAYLOAD[i : i + 1000]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "No space left" in warnings[0] and "uncached" in warnings[0]
    assert cache.counters["fill_errors"] == 1  # then fills pause instead of failing again and again
    assert os.listdir(tmp_path / "tmp") == []  # the failed fill's temporary file is gone


def test_an_unwritable_cache_dir_never_fails_a_read(remote, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    cache = HotTierStore(remote, blocker / "cache", cache_bytes=1 << 20)  # a directory under a file
    with caplog.at_level(logging.WARNING):
        assert cache.get_range("data/p0/a.tgb", 0, 10) == PAYLOAD[:10]
    assert "hot tier" in caplog.text and caplog.text.count("WARNING") == 1  # one warning a minute at most
    assert cache.counters["fill_errors"] == 1


def test_lru_eviction_keeps_the_cache_bounded_and_the_recent_entries(remote, tmp_path):
    budget = 64 * 1024
    cache = HotTierStore(remote, tmp_path, cache_bytes=budget)
    size = 4096
    cache.get_range("data/p0/a.tgb", 0, size)  # the entry we keep using
    for i in range(1, 40):
        start = (i * 300) % (len(PAYLOAD) - size)
        cache.get_range("data/p0/a.tgb", start, start + size + i)  # distinct entries
        os.utime(cache.entry_path("data/p0/a.tgb", start, start + size + i), (i, i))  # older than the kept one
        cache.get_range("data/p0/a.tgb", 0, size)
    total = cache.evict()
    assert 0 < total <= budget
    on_disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp_path / "v1") for f in fs)
    assert on_disk == total
    assert os.path.exists(cache.entry_path("data/p0/a.tgb", 0, size))


def test_a_recreated_namespace_never_sees_the_old_bytes(tmp_path):
    name = f"hot-recreate-{uuid.uuid4().hex}"
    first = MemoryStore(name)
    first.put("_tgb/dataset.json", b'{"created_at": 1}')
    first.put("data/p0/a.tgb", b"old bytes")
    assert HotTierStore(first, tmp_path, cache_bytes=1 << 20).get_range("data/p0/a.tgb", 0, 9) == b"old bytes"
    first.destroy()
    again = MemoryStore(name)  # the same URL, a new namespace
    again.put("_tgb/dataset.json", b'{"created_at": 2}')
    again.put("data/p0/a.tgb", b"new bytes")
    assert HotTierStore(again, tmp_path, cache_bytes=1 << 20).get_range("data/p0/a.tgb", 0, 9) == b"new bytes"
    again.destroy()


def test_deleting_through_the_tier_drops_this_nodes_entries(remote, tmp_path):
    cache = HotTierStore(remote, tmp_path, cache_bytes=1 << 20)
    cache.get_range("data/p0/a.tgb", 0, 10)
    cache.get_range("data/p0/a.tgb", 10, 20)
    cache.delete("data/p0/a.tgb")
    assert not os.path.exists(cache.entry_path("data/p0/a.tgb", 0, 10))
    assert not os.path.exists(cache.entry_path("data/p0/a.tgb", 10, 20))


def test_a_local_namespace_is_not_wrapped(tmp_path, remote):
    local = LocalStore(tmp_path / "ns")
    assert with_hot_tier(local, tmp_path / "cache") is local
    assert with_hot_tier(remote, None) is remote
    assert isinstance(with_hot_tier(remote, tmp_path / "cache", 1 << 20), HotTierStore)
