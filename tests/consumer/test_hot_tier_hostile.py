"""Hostile hot-tier entries: a valid entry under another entry's name, a FIFO where an entry should be.

An entry's checksum covers the namespace, key and byte range it was filled for, so an
entry copied over another of the same length (a misplaced restore, a buggy sync tool, a
hand "repair") is a miss: the reader gets the right bytes from the store, under every
verify policy, never the bytes of another range.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import defaultdict

import pytest
import torch
from _support import LAYOUT, make_batch, produce

import torch_tgb as tgb
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.storage import HotTierStore, MemoryStore
from torch_tgb.testing.counting import CountingStore

MESH = tgb.Mesh(1, 2, 0, 2)
STEPS = 6


def _want(step: int) -> dict[str, torch.Tensor]:
    return LAYOUT.cut(make_batch(step))[MESH.dp_rank * LAYOUT.cp + MESH.cp_rank].tensors


@pytest.fixture
def remote():
    inner = MemoryStore(f"hot-hostile-{uuid.uuid4().hex}")
    produce(inner, STEPS)
    yield CountingStore(inner)
    inner.destroy()


def _entries(cache_dir: str) -> list[str]:
    return sorted(os.path.join(root, name) for root, _, names in os.walk(os.path.join(cache_dir, "v1"))
                  for name in names)


def _rotate_same_length(paths: list[str]) -> int:
    """Each entry gets the bytes of the next entry of its length (a cycle per length); how many moved."""
    by_size: dict[int, list[str]] = defaultdict(list)
    for p in paths:
        by_size[os.path.getsize(p)].append(p)
    moved = 0
    for group in by_size.values():
        raw = [open(p, "rb").read() for p in group]
        if len(set(raw)) < 2:
            continue
        for i, p in enumerate(group):
            with open(p, "wb") as f:
                f.write(raw[(i + 1) % len(group)])
            moved += raw[i] != raw[(i + 1) % len(group)]
    return moved


@pytest.mark.parametrize("verify", ["never", "first"])
def test_an_entry_copied_over_another_of_the_same_length_is_never_delivered(remote, tmp_path, verify):
    cache = str(tmp_path / "cache")
    options = ReaderOptions(cache_dir=cache, cache_bytes=1 << 24, verify=verify)
    first = list(tgb.TGBDataset(remote, mesh=MESH, options=options))  # fills the tier: footers and slices
    assert len(first) == STEPS
    moved = _rotate_same_length(_entries(cache))
    assert moved >= 2  # footers of several objects and slices of several steps share a length
    before = remote.range_reads("data/")
    batches = list(tgb.TGBDataset(remote, mesh=MESH, options=options))
    assert len(batches) == STEPS
    for step, batch in enumerate(batches):
        want = _want(step)
        assert all(torch.equal(batch[k], want[k]) for k in want), (verify, step)
    assert remote.range_reads("data/") > before  # the moved entries were misses, read from the store


def test_an_entry_filed_for_another_range_of_the_same_key_is_a_miss(remote, tmp_path):
    tier = HotTierStore(remote, tmp_path / "cache", cache_bytes=1 << 24)
    key = remote.list("data/")[0]
    a, b = remote.get_range(key, 0, 64), remote.get_range(key, 64, 128)
    assert a != b
    tier.get_range(key, 0, 64)
    tier.get_range(key, 64, 128)
    os.replace(tier.entry_path(key, 64, 128), tier.entry_path(key, 0, 64))  # [64, 128) filed as [0, 64)
    assert tier.get_range(key, 0, 64) == a
    assert tier.counters["damaged"] == 1


def test_an_entry_of_another_namespace_is_a_miss(tmp_path):
    """Two namespaces' entries of one key and range, swapped between their directories."""
    stores = [MemoryStore(f"hot-ns-{uuid.uuid4().hex}") for _ in range(2)]
    try:
        for i, s in enumerate(stores):
            s.put("_tgb/dataset.json", b'{"id": %d}' % i)
            s.put("data/p0/a.tgb", bytes([i]) * 4096)
        tiers = [HotTierStore(s, tmp_path / "cache", cache_bytes=1 << 24) for s in stores]
        for t in tiers:
            t.get_range("data/p0/a.tgb", 0, 4096)
        os.replace(tiers[1].entry_path("data/p0/a.tgb", 0, 4096), tiers[0].entry_path("data/p0/a.tgb", 0, 4096))
        assert tiers[0].get_range("data/p0/a.tgb", 0, 4096) == bytes([0]) * 4096
    finally:
        for s in stores:
            s.destroy()


def test_an_entry_written_by_an_older_version_is_refetched_never_trusted(remote, tmp_path):
    """The v1 trailer (CRC of the payload alone) is not trusted: a miss, removed, filled again."""
    import struct

    import google_crc32c

    tier = HotTierStore(remote, tmp_path / "cache", cache_bytes=1 << 24)
    key = remote.list("data/")[0]
    good = remote.get_range(key, 0, 64)
    wrong = remote.get_range(key, 64, 128)  # what an old entry moved here would hold
    path = tier.entry_path(key, 0, 64)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(wrong + struct.pack("<4sIQ", b"TGBH", google_crc32c.value(wrong), len(wrong)))
    assert tier.get_range(key, 0, 64) == good
    assert tier.counters["damaged"] == 1 and tier.counters["fills"] == 1
    assert tier.get_range(key, 0, 64) == good and tier.counters["hits"] == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("planted", ["fifo", "symlink to a fifo", "directory", "symlink to an entry"])
@pytest.mark.parametrize("call", ["get_range", "get_range_into", "get_ranges"])
def test_a_fifo_or_other_non_file_at_an_entry_path_is_a_miss_never_a_wait(remote, tmp_path, planted, call):
    """A plain ``open(path, "rb")`` of a FIFO waits for a writer forever: every reader of the node would hang."""
    from torch_tgb.storage import RangeRequest

    tier = HotTierStore(remote, tmp_path / "cache", cache_bytes=1 << 24)
    key = remote.list("data/")[0]
    n = min(4096, remote.stat(key).size)  # the first bytes of a TGB object (small objects are smaller than a page)
    want = remote.get_range(key, 0, n)
    path = tier.entry_path(key, 0, n)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if planted == "fifo":
        os.mkfifo(path)
    elif planted == "symlink to a fifo":
        os.mkfifo(tmp_path / "pipe")
        os.symlink(tmp_path / "pipe", path)
    elif planted == "directory":
        os.mkdir(path)
    else:  # a valid entry of this very range, reached through a link: the cache never makes one
        tier.get_range(key, 0, n)
        os.replace(path, tmp_path / "elsewhere")
        os.symlink(tmp_path / "elsewhere", path)
    before = remote.range_reads("data/")
    if call == "get_range":
        got = tier.get_range(key, 0, n)
    elif call == "get_range_into":
        out = bytearray(n)
        assert tier.get_range_into(key, 0, memoryview(out)) == n
        got = bytes(out)
    else:
        [got] = tier.get_ranges([RangeRequest(key, 0, n)])
    assert got == want
    assert remote.range_reads("data/") == before + 1  # a miss, served by the store
    if planted != "directory":  # removed and filled again: the next read is a hit on a regular file
        assert os.path.isfile(path) and not os.path.islink(path)
        assert tier.get_range(key, 0, n) == want and remote.range_reads("data/") == before + 1


@pytest.mark.timeout(120)
def test_a_reader_over_a_tier_with_fifos_at_every_entry_delivers_every_step(remote, tmp_path):
    cache = str(tmp_path / "cache")
    options = ReaderOptions(cache_dir=cache, cache_bytes=1 << 24)
    list(tgb.TGBDataset(remote, mesh=MESH, options=options))
    entries = _entries(cache)
    assert entries
    for path in entries:
        os.unlink(path)
        os.mkfifo(path)
    done: list[list[dict]] = []
    reader = threading.Thread(target=lambda: done.append(list(tgb.TGBDataset(remote, mesh=MESH, options=options))),
                              daemon=True)
    reader.start()
    reader.join(90)  # a reader blocked on a FIFO never returns: the join would run out, failing below
    assert done, "the reader blocked on a FIFO in the hot tier"
    for step, batch in enumerate(done[0]):
        want = _want(step)
        assert all(torch.equal(batch[k], want[k]) for k in want), step
