"""The node share (``NodeSharedStore``): one request per node, not per process; safe local answers.

Several ``NodeSharedStore`` objects over one directory stand for the reader
processes of a node (real processes where locks or deaths matter); requests
are counted on the store side.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing as mp
import os
import signal
import threading
import time
import uuid

import pytest

from torch_tgb.errors import ManifestError, ObjectNotFound
from torch_tgb.manifest import Committer, Manifest, TGBEntry
from torch_tgb.manifest import keys as manifest_keys
from torch_tgb.manifest._json import MAX_METADATA_BYTES
from torch_tgb.manifest.keys import version_key
from torch_tgb.storage import (
    ForwardingStore,
    LatencyStore,
    LocalStore,
    MemoryStore,
    NodeSharedStore,
    ObjectStore,
    RangeRequest,
    with_node_share,
)
from torch_tgb.storage import node_share
from torch_tgb.testing.counting import CountingStore
from torch_tgb.testing.store_contract import StoreContract

from tests._key_layouts import SPREAD, create_namespace

DATASET = b'{"created_at": 1}'
VERSION = b'{"a version": 1}'
V1, V2 = version_key(1), version_key(2)
BOUNDARY = "_tgb/gc_boundary/"


class Clock:
    """A clock the test moves (every store of one test shares it, as processes share CLOCK_MONOTONIC)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def inner():
    store = MemoryStore(f"share-{uuid.uuid4().hex}")
    store.put("_tgb/dataset.json", DATASET)
    store.put(V1, VERSION)
    yield store
    store.destroy()


@pytest.fixture
def remote(inner):
    return CountingStore(inner)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def node(remote, tmp_path, clock):
    """A node: ``node()`` is one more reader process's store over the shared directory."""
    return lambda **kw: NodeSharedStore(remote, tmp_path, clock=clock, **kw)


def log_gets(remote: CountingStore, key: str) -> int:
    return remote.range_keys[key]


def started(store: ObjectStore) -> Committer:
    committer = Committer(Manifest(store), "p0")
    committer.start()
    return committer


def commit(committer: Committer, n: int) -> int:
    """One version of ``n`` entries (the manifest never opens their objects); returns its number."""
    first = committer.next_offset
    result = committer.attempt([TGBEntry(f"data/p0/o{o:08d}.tgb", 128, 96, 8, "p0", o, 4, 0)
                                for o in range(first, first + n)])
    assert result.committed, result
    return result.version


class TestNodeShareContract(StoreContract):
    """Everything passes through, or is answered exactly as the store would."""

    race_processes = 0  # over a MemoryStore

    @pytest.fixture
    def store(self, tmp_path):
        inner = MemoryStore(f"share-contract-{uuid.uuid4().hex}")
        yield NodeSharedStore(inner, tmp_path)
        inner.destroy()


def test_its_keys_are_the_manifests():
    assert node_share.LOG_PREFIX == manifest_keys.LOG_PREFIX
    assert node_share.SNAPSHOT_PREFIX == manifest_keys.SNAPSHOT_PREFIX
    assert node_share.DATASET_KEY == manifest_keys.DATASET_KEY
    assert node_share.HINT_KEY == manifest_keys.SNAPSHOT_HINT_KEY
    assert node_share.BOUNDARY_PREFIX == manifest_keys.GC_BOUNDARY_PREFIX
    assert node_share.LEGACY_BOUNDARY_KEY == manifest_keys.GC_BOUNDARY_KEY


@pytest.mark.parametrize("layout", [manifest_keys.FLAT, SPREAD], ids=["flat", "spread"])
def test_both_key_layouts_classify_alike(layout):
    """Versions, snapshots and their parts are immutable answers in both layouts (spread keys lie under the same
    prefixes); the hint, the boundary and dataset.json keep their own kinds."""
    for key in (layout.version_key(7), layout.snapshot_key(16), layout.snapshot_part_key(16, 3)):
        assert node_share._kind(key) == node_share._IMMUTABLE, key
    assert node_share._kind(manifest_keys.SNAPSHOT_HINT_KEY) == node_share._MUTABLE
    assert node_share._kind(manifest_keys.DATASET_KEY) == node_share._DATASET
    assert node_share._kind(manifest_keys.boundary_key(1, 2)) is None  # a LIST of them is shared, not a key
    assert node_share.MAX_ANSWER_BYTES == MAX_METADATA_BYTES


def test_a_version_is_fetched_once_per_node(node, remote):
    stores = [node() for _ in range(4)]
    for s in stores:
        assert s.exists(V1) and s.get_range(V1, 0, 1 << 20) == VERSION and s.get(V1) == VERSION
        assert s.get_range(V1, 2, 4) == VERSION[2:4]
    assert log_gets(remote, V1) == 1  # the probe of the first process was its read, for the whole node
    assert remote.calls["exists"] == 0  # a probe of a version is a GET: a version found is read next
    assert sum(s.counters["fetches"] for s in stores) == 2  # dataset.json and the version
    out = bytearray(4)
    assert stores[1].get_range_into(V1, 1, memoryview(out)) == 4 and bytes(out) == VERSION[1:5]
    got = stores[2].get_ranges([RangeRequest(V1, 0, 3), RangeRequest("_tgb/dataset.json", 0, 5)])
    assert got == [VERSION[:3], DATASET[:5]] and log_gets(remote, V1) == 1


def test_data_and_other_keys_pass_through(node, remote, inner):
    inner.put("data/p0/a.tgb", b"slice bytes")
    inner.put("_tgb/watermarks/c1.json", b"{}")
    s = node()
    for _ in range(2):
        assert s.get_range("data/p0/a.tgb", 0, 5) == b"slice"
        assert s.get("_tgb/watermarks/c1.json") == b"{}"
        assert s.list("data/") == ["data/p0/a.tgb"]
    assert remote.range_keys["data/p0/a.tgb"] == 2 and remote.calls["list"] == 2 and remote.calls["get"] == 2


def test_single_flight_across_threads(inner, tmp_path):
    slow = CountingStore(LatencyStore(inner, rtt=0.05, bandwidth=0))
    stores = [NodeSharedStore(slow, tmp_path) for _ in range(8)]
    stores[0].exists("_tgb/dataset.json")  # the namespace is known: only the version's fetch races
    start = threading.Barrier(len(stores))
    results: list[bytes] = []

    def read(s: NodeSharedStore) -> None:
        start.wait()
        results.append(s.get_range(V1, 0, 100))

    threads = [threading.Thread(target=read, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [VERSION] * len(stores)
    assert slow.range_keys[V1] == 1


def _read_in_a_process(root: str, directory: str, start, results) -> None:  # type: ignore[no-untyped-def]
    remote = CountingStore(LatencyStore(LocalStore(root), rtt=0.05, bandwidth=0))
    store = NodeSharedStore(remote, directory)
    store.exists("_tgb/dataset.json")
    start.wait()
    data = store.get_range(V1, 0, 100)
    results.put((data, remote.range_keys[V1]))


def test_single_flight_across_processes(tmp_path):
    root = tmp_path / "ns"
    LocalStore(root).put("_tgb/dataset.json", DATASET)
    LocalStore(root).put(V1, VERSION)
    ctx = mp.get_context("spawn")
    start, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_read_in_a_process, args=(str(root), str(tmp_path / "node"), start, results))
             for _ in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert [data for data, _ in outcomes] == [VERSION] * 4
    assert sum(n for _, n in outcomes) == 1  # one GET of the version for the four processes


def test_an_absent_version_is_shared_for_ttl(node, remote, inner, clock):
    a, b = node(ttl=2.0), node(ttl=2.0)
    assert not a.exists(V2) and not b.exists(V2)
    assert log_gets(remote, V2) == 1
    inner.put(V2, VERSION)  # committed now: the node learns it within ttl
    clock.now += 1.0
    assert not b.exists(V2) and log_gets(remote, V2) == 1
    clock.now += 1.5
    assert b.exists(V2) and a.exists(V2) and a.get(V2) == VERSION
    assert log_gets(remote, V2) == 2  # one more probe, which was the read


def test_a_read_never_takes_an_absence_asked_before_it(node, remote, inner):
    a, b = node(), node()
    assert not a.exists(V2)
    inner.put(V2, VERSION)  # a version another probe said was absent, needed now by a replay
    assert b.get_range(V2, 0, 100) == VERSION
    assert log_gets(remote, V2) == 2


def test_the_boundary_list_is_shared_until_a_fetch_fences_it(node, remote, inner, clock):
    a, b = node(boundary_ttl=30.0), node(boundary_ttl=30.0)
    a.get(V1)
    inner.put(BOUNDARY + "g1", b"{}")
    assert a.list(BOUNDARY) == b.list(BOUNDARY) == [BOUNDARY + "g1"]
    assert remote.calls["list"] == 1
    clock.now += 1
    inner.put(V2, VERSION)
    inner.put(BOUNDARY + "g2", b"{}")
    assert b.list(BOUNDARY) == [BOUNDARY + "g1"] and remote.calls["list"] == 1  # shared: nothing fetched since
    assert a.get(V2) == VERSION  # the node reads a version: it must be checked against a boundary listed after it
    assert b.list(BOUNDARY) == a.list(BOUNDARY) == [BOUNDARY + "g1", BOUNDARY + "g2"]
    assert remote.calls["list"] == 2
    clock.now += 31  # and at most boundary_ttl old in any case
    assert a.list(BOUNDARY) == [BOUNDARY + "g1", BOUNDARY + "g2"] and remote.calls["list"] == 3


def test_a_read_that_finds_a_version_gone_fences_the_boundary(node, remote, inner, clock):
    a = node()
    assert a.list(BOUNDARY) == [] and remote.calls["list"] == 1
    inner.delete([V1])  # reclaimed under us
    inner.put(BOUNDARY + "g1", b"{}")
    clock.now += 1
    with pytest.raises(ObjectNotFound, match=V1):
        node().get_range(V1, 0, 10)
    assert a.list(BOUNDARY) == [BOUNDARY + "g1"] and remote.calls["list"] == 2


def test_the_hint_is_shared_for_ttl(node, remote, inner, clock):
    inner.put("_tgb/snapshot_hint.json", b'{"version": 1}')
    a, b = node(ttl=2.0), node(ttl=2.0)
    assert a.get("_tgb/snapshot_hint.json") == b.get("_tgb/snapshot_hint.json") == b'{"version": 1}'
    inner.put("_tgb/snapshot_hint.json", b'{"version": 2}')
    clock.now += 2.5
    assert b.get("_tgb/snapshot_hint.json") == b'{"version": 2}'
    assert remote.range_keys["_tgb/snapshot_hint.json"] == 2


def test_before_the_namespace_exists_only_its_absence_is_shared(remote, inner, tmp_path, clock):
    inner.delete(["_tgb/dataset.json"])
    a, b = (NodeSharedStore(remote, tmp_path, clock=clock) for _ in range(2))
    for s in (a, b):
        with pytest.raises(ObjectNotFound):
            s.get("_tgb/dataset.json")
        assert s.get(V1) == VERSION  # not shared: no incarnation to file it under
    assert remote.range_keys["_tgb/dataset.json"] == 1 and remote.calls["get"] == 2
    assert a.counters["unshared"] == 1


def test_a_recreated_namespace_never_sees_the_old_answers(tmp_path, clock):
    name = f"share-recreate-{uuid.uuid4().hex}"
    first = MemoryStore(name)
    first.put("_tgb/dataset.json", b'{"created_at": 1}')
    first.put(V1, b"old version")
    assert NodeSharedStore(first, tmp_path, clock=clock).get(V1) == b"old version"
    first.destroy()
    again = MemoryStore(name)  # the same URL, a new namespace
    again.put("_tgb/dataset.json", b'{"created_at": 2}')
    again.put(V1, b"new version")
    clock.now += 3  # a process opening after ttl reads dataset.json again
    assert NodeSharedStore(again, tmp_path, clock=clock).get(V1) == b"new version"
    again.destroy()


class Hang(ForwardingStore):
    """Hangs (until killed) in its first read of ``key``, after telling ``ready``."""

    def __init__(self, inner: ObjectStore, key: str, ready) -> None:  # type: ignore[no-untyped-def]
        super().__init__(inner)
        self.key, self.ready = key, ready

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if key == self.key:
            self.ready.set()
            time.sleep(600)
        return self.inner.get_range(key, start, end)


def _fetch_and_hang(root: str, directory: str, ready, stage: str) -> None:  # type: ignore[no-untyped-def]
    store = NodeSharedStore(Hang(LocalStore(root), V1 if stage == "fetch" else "none", ready), directory)
    if stage == "rename":  # the answer written whole, not yet renamed into place
        import torch_tgb.storage._node_dir as node_dir

        def hang(*args, **kwargs):  # type: ignore[no-untyped-def]
            ready.set()
            time.sleep(600)

        store.exists("_tgb/dataset.json")
        node_dir.os.replace = hang  # type: ignore[attr-defined]
    store.get(V1)


@pytest.mark.parametrize("stage", ["fetch", "rename"])
def test_a_process_killed_holding_the_lock_never_blocks_the_node(tmp_path, stage):
    root = tmp_path / "ns"
    LocalStore(root).put("_tgb/dataset.json", DATASET)
    LocalStore(root).put(V1, VERSION)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_fetch_and_hang, args=(str(root), str(tmp_path / "node"), ready, stage))
    child.start()
    assert ready.wait(60), "the child never reached its fetch"
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    remote = CountingStore(LocalStore(root))
    store = NodeSharedStore(remote, tmp_path / "node", lock_timeout=120)
    assert store.get(V1) == VERSION
    assert store.counters["lock_timeouts"] == 0  # the dead holder's flock went with it
    assert remote.range_keys[V1] == 1  # its half-done answer was never taken
    if stage == "rename":
        assert os.listdir(os.path.join(store.node_dir.path, "tmp"))  # the dead writer's file, never read


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_damaged_local_answer_is_refetched(node, remote, damage):
    a = node()
    a.get(V1)
    path = a.answer_path(V1)
    raw = bytearray(open(path, "rb").read())
    raw = {"truncate": raw[: len(raw) // 2], "flip": raw[:3] + bytes([raw[3] ^ 0xFF]) + raw[4:],
           "garbage": bytearray(b"{}" * 40), "empty": bytearray()}[damage]
    open(path, "wb").write(raw)
    b = node()
    assert b.get(V1) == VERSION and log_gets(remote, V1) == 2
    assert b.get(V1) == VERSION and log_gets(remote, V1) == 2  # written again whole: a hit


@pytest.mark.parametrize("keys", ["flat", "spread"])  # the share needs a dataset.json: its incarnation
def test_a_manifest_reads_through_a_damaged_answer(tmp_path, keys):
    inner = create_namespace(MemoryStore(f"share-manifest-{uuid.uuid4().hex}"), keys)
    try:
        committer = started(inner)
        commit(committer, 3)
        remote = CountingStore(inner)
        first = NodeSharedStore(remote, tmp_path)
        head = Manifest(first).head()
        version_key = Manifest(inner).version_key
        assert (version_key(head.version).count("/") == 3) == (keys == "spread")  # _tgb/log/<p>/<v>.json
        path = first.answer_path(version_key(head.version))
        with open(path, "r+b") as f:
            f.write(b"[not json")  # bit rot: the trailer's CRC no longer matches
        assert Manifest(NodeSharedStore(remote, tmp_path)).head() == head
        inner.put(version_key(head.version), b"[not json")  # bytes bad at the store: as loud as without the share
        with pytest.raises(ManifestError, match=f"version={head.version}"):
            Manifest(NodeSharedStore(remote, tmp_path / "elsewhere")).head()
    finally:
        inner.destroy()


def test_a_fifo_or_symlink_planted_in_the_directory_neither_blocks_nor_escapes(node, remote, tmp_path):
    a = node()
    a.get(V1)
    fifo, link = a.answer_path(V1), a.answer_path(V2)
    os.unlink(fifo)
    os.mkfifo(fifo)  # a read that opened it blocking would hang here
    outside = tmp_path / "outside"
    outside.write_bytes(open(a.answer_path("_tgb/dataset.json"), "rb").read())  # a valid answer, outside
    os.symlink(outside, link)
    b = node()
    assert b.get(V1) == VERSION and b.get(V1) == VERSION
    with pytest.raises(ObjectNotFound):
        b.get(V2)  # not the planted answer: the store says there is no version 2
    assert outside.read_bytes() == open(a.answer_path("_tgb/dataset.json"), "rb").read()  # never written through
    assert not os.path.islink(link) and os.path.isfile(link) and os.path.isfile(fifo)


def test_a_directory_not_ours_alone_is_not_used(remote, tmp_path, caplog):
    home = tmp_path / f"torch_tgb-{os.geteuid()}"
    home.mkdir(mode=0o777)
    os.chmod(home, 0o777)  # open to everyone: another user could plant answers
    s = NodeSharedStore(remote, tmp_path)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert s.get(V1) == VERSION and not s.exists(V2)
    assert remote.calls["get"] == 2 and "node share" in caplog.text and caplog.text.count("WARNING") == 1
    assert os.listdir(home) == []


def test_a_symlinked_namespace_directory_is_not_followed(remote, tmp_path):
    s = NodeSharedStore(remote, tmp_path)
    s.get(V1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    moved = s.node_dir.path + ".moved"
    os.rename(s.node_dir.path, moved)
    os.symlink(elsewhere, s.node_dir.path)
    fresh = NodeSharedStore(remote, tmp_path)
    assert fresh.get(V1) == VERSION and fresh.get(V1) == VERSION
    assert os.listdir(elsewhere) == []


def test_the_directory_stays_bounded(remote, inner, tmp_path):
    body = b"x" * 3000
    for v in range(1, 101):
        inner.put(version_key(v), body)
    s = NodeSharedStore(remote, tmp_path, max_bytes=64 * 1024)
    s.exists("_tgb/dataset.json")  # the node directory is made (0700)
    stale = s.node_dir.path.replace(s.node_dir.name, "0" * 24)
    os.makedirs(os.path.join(stale, "x"))
    open(os.path.join(stale, "x", "old"), "wb").write(b"old")
    os.utime(os.path.join(stale, "x", "old"), (1, 1))
    def on_disk() -> int:
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(s.node_dir.home) for f in fs)

    for v in range(1, 101):
        assert s.get(version_key(v)) == body
        assert on_disk() <= 64 * 1024 * 17 // 16 + 4096  # pruned as it goes: over by 1/16 at most between looks
    s.node_dir.prune()
    assert on_disk() <= 64 * 1024
    assert os.path.exists(s.answer_path(version_key(100)))  # the newest kept
    assert not os.path.exists(stale)  # a namespace unused for a day is gone


def test_which_stores_are_wrapped(tmp_path, inner):
    local = LocalStore(tmp_path / "ns")
    remote_like = LatencyStore(local, rtt=0.0)
    assert with_node_share(local) is local  # a local directory: the page cache serves the node already
    assert with_node_share(inner, tmp_path) is inner  # memory://: nothing to share between processes
    assert isinstance(with_node_share(remote_like), NodeSharedStore)
    assert with_node_share(remote_like, True, handed_in=True) is remote_like  # a store handed in is kept as is...
    shared = with_node_share(remote_like, str(tmp_path / "node"), handed_in=True)  # ...unless a directory is named
    assert isinstance(shared, NodeSharedStore) and shared.directory == str(tmp_path / "node")
    assert with_node_share(remote_like, None) is remote_like and with_node_share(remote_like, False) is remote_like
    with pytest.raises(TypeError):
        with_node_share(remote_like, 3)  # type: ignore[arg-type]


class _Found(ForwardingStore):
    """Counts the reads that found their object, per key (a probe answered "absent" is not a fetch of it)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.found: dict[str, int] = {}

    def get_range(self, key: str, start: int, end: int) -> bytes:
        data = self.inner.get_range(key, start, end)
        self.found[key] = self.found.get(key, 0) + 1
        return data


def _follow(root: str, directory: str, ttl: float, last: int, results) -> None:  # type: ignore[no-untyped-def]
    """A reader process: a Manifest polling head() every 20 ms until it sees version ``last``."""
    found = _Found(LatencyStore(LocalStore(root), rtt=0.002, bandwidth=0))
    remote = CountingStore(found)
    store = NodeSharedStore(remote, directory, ttl=ttl)
    manifest = Manifest(store)
    deadline = time.monotonic() + 120
    while manifest.head().version < last and time.monotonic() < deadline:
        time.sleep(0.02)
    results.put((dict(remote.range_keys), found.found, remote.calls["list"], manifest.head().version))


def test_four_processes_of_a_node_fetch_each_version_once(tmp_path):
    root = tmp_path / "ns"
    store = create_namespace(LocalStore(root), "spread")  # the default for new namespaces
    committer = started(store)
    first = commit(committer, 1)
    ttl, versions = 0.25, 8
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    began = time.monotonic()
    last = first + versions
    procs = [ctx.Process(target=_follow, args=(str(root), str(tmp_path / "node"), ttl, last, results))
             for _ in range(4)]
    for p in procs:
        p.start()
    for _ in range(versions):
        time.sleep(0.15)
        commit(committer, 1)
    outcomes = [results.get(timeout=180) for _ in procs]
    duration = time.monotonic() - began
    for p in procs:
        p.join(30)
    assert [version for *_, version in outcomes] == [last] * 4
    gets: dict[str, int] = {}
    fetched: dict[str, int] = {}
    for keys, found, _, _ in outcomes:
        for key, n in keys.items():
            gets[key] = gets.get(key, 0) + n
        for key, n in found.items():
            fetched[key] = fetched.get(key, 0) + n
    version_key = Manifest(store).version_key
    assert version_key(last) != manifest_keys.version_key(last)  # spread keys: still shared by the node
    for v in range(1, last + 1):
        assert fetched.get(version_key(v), 0) <= 1, (v, fetched)  # each version fetched once for the node
    absent = sum(n for k, n in gets.items() if k.startswith("_tgb/log/")) - last
    assert absent <= math.ceil(duration / ttl) + 2 * versions + 4, (absent, duration)
    lists = sum(n for _, _, n, _ in outcomes)
    assert lists <= versions + 4, lists  # one LIST of the boundary per discovery, not per process and poll


def test_dataset_json_is_answered_from_the_process_copy(node, remote):
    s = node()
    assert json.loads(s.get("_tgb/dataset.json")) == {"created_at": 1}
    for _ in range(3):
        assert s.get_range("_tgb/dataset.json", 0, 1 << 20) == DATASET and s.exists("_tgb/dataset.json")
    assert remote.range_keys["_tgb/dataset.json"] == 1
