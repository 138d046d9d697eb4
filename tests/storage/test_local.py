"""LocalStore specifics: containment (symlinks), temp files, failures mid-write, mmap."""

from __future__ import annotations

import errno
import mmap
import os
import threading

import pytest

from torch_tgb.errors import ConditionalWriteUnsupported, InvalidKey, ObjectNotFound, StorageError, StorageFull
from torch_tgb.storage import LocalStore
from torch_tgb.storage import _local_writer as local_writer
from torch_tgb.storage import local as local_module


@pytest.fixture
def root(tmp_path):
    (tmp_path / "ns").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_bytes(b"do not read")
    return tmp_path


@pytest.fixture(params=["after-open", "path-walk"])
def containment(request, monkeypatch):
    """Both containment checks: the descriptor's own path (Linux) and the path walk (elsewhere)."""
    if request.param == "path-walk":
        monkeypatch.setattr(local_module, "_PROC_FD", False)
    return request.param


def test_symlinked_directory_out_of_namespace_is_refused(root, containment):
    store = LocalStore(root / "ns")
    os.symlink(root / "outside", root / "ns" / "link")
    for op in (
        lambda: store.get("link/secret"),
        lambda: store.get_range("link/secret", 0, 3),
        lambda: store.stat("link/secret"),
        lambda: store.exists("link/secret"),
        lambda: store.put("link/new", b"x"),
        lambda: store.put_if_absent("link/new", b"x"),
        lambda: store.delete("link/secret"),
        lambda: store.list("link/"),
        lambda: store.local_path("link/secret"),
    ):
        with pytest.raises(InvalidKey, match="link/"):
            op()
    assert sorted(os.listdir(root / "outside")) == ["secret"]
    assert (root / "outside" / "secret").read_bytes() == b"do not read"
    assert store.list() == []  # the link is not part of the namespace


def test_symlinked_file_out_of_namespace_is_refused(root, containment):
    store = LocalStore(root / "ns")
    os.symlink(root / "outside" / "secret", root / "ns" / "alias")
    with pytest.raises(InvalidKey, match="alias"):
        store.get("alias")
    with pytest.raises(InvalidKey):
        store.put("alias", b"overwrite")
    assert (root / "outside" / "secret").read_bytes() == b"do not read"
    assert store.list() == []


def test_symlink_inside_namespace_is_allowed(root, containment):
    store = LocalStore(root / "ns")
    store.put("real/obj", b"data")
    os.symlink(root / "ns" / "real", root / "ns" / "alias")
    assert store.get("alias/obj") == b"data"


def test_root_may_itself_be_a_symlink(root):
    os.symlink(root / "ns", root / "ns-link")
    store = LocalStore(root / "ns-link")
    store.put("k", b"v")
    assert (root / "ns" / "k").read_bytes() == b"v"
    assert store.url == f"file://{root / 'ns'}"


def test_temp_files_are_invisible_and_reserved(root):
    store = LocalStore(root / "ns")
    store.put("d/k", b"v")
    (root / "ns" / "d" / ".tgb-tmp.deadbeef").write_bytes(b"half")  # a crashed writer's leftover
    assert store.list() == ["d/k"]
    with pytest.raises(InvalidKey, match="reserved"):
        store.put("d/.tgb-tmp.deadbeef", b"x")


def test_writes_leave_no_temp_files(root):
    store = LocalStore(root / "ns")
    store.put("a/1", b"x")
    store.put("a/1", b"y")
    assert store.put_if_absent("a/2", b"z")
    assert not store.put_if_absent("a/2", b"w")
    assert sorted(os.listdir(root / "ns" / "a")) == ["1", "2"]


def test_disk_full_mid_write_publishes_nothing(root, monkeypatch):
    store = LocalStore(root / "ns")
    store.put("keep", b"old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(StorageFull, match="keep"):
        store.put("keep", b"new content")
    with pytest.raises(StorageFull):
        store.put_if_absent("fresh", b"new content")
    monkeypatch.undo()
    assert store.get("keep") == b"old"
    assert not store.exists("fresh")
    assert os.listdir(root / "ns") == ["keep"]


def test_a_writer_writes_in_place_and_publishes_with_fsync(root, monkeypatch):
    store = LocalStore(root / "ns")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    writer = store.open_writer("data/seg")
    writer.write_at(0, [b"a" * 5000])
    temps = os.listdir(root / "ns" / "data")
    assert len(temps) == 1 and temps[0].startswith(".tgb-tmp.")  # the bytes are on disk already, under a temp name
    assert os.path.getsize(root / "ns" / "data" / temps[0]) == 5000
    assert store.list() == [] and not synced
    writer.write_at(8192, [b"b"])
    writer.commit()
    assert len(synced) == 2  # the file, then its directory
    assert os.listdir(root / "ns" / "data") == ["seg"]
    assert store.get("data/seg") == b"a" * 5000 + bytes(8192 - 5000) + b"b"
    with pytest.raises(ValueError, match="committed or aborted"):
        writer.write_at(0, [b"late"])


def test_a_writer_finishes_short_writes(root, monkeypatch):
    """pwritev may write less than asked (a signal, a pipe-like file system): every byte still lands in place."""
    store = LocalStore(root / "ns")
    real = os.pwritev

    def short(fd, buffers, offset):  # at most 3 bytes of the first buffer per call
        return real(fd, [bytes(buffers[0][:3])], offset)

    monkeypatch.setattr(os, "pwritev", short)
    writer = store.open_writer("short")
    assert writer.write_at(0, [b"abcdefg", b"", b"hi", memoryview(b"jklmno")[1:]]) == 14
    assert writer.write_at(20, [b"xyz"]) == 23
    writer.commit()
    assert store.get("short") == b"abcdefghiklmno" + bytes(6) + b"xyz"


def test_a_writer_syncs_in_the_background_as_it_goes_and_the_commit_syncs_the_rest(root, monkeypatch):
    """Every WRITEBACK_BYTES a background fdatasync (off the caller's thread); the commit still fsyncs the file."""
    monkeypatch.setattr(local_writer, "WRITEBACK_BYTES", 1000)
    store = LocalStore(root / "ns")
    background, synced = [], []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (background.append(threading.current_thread().name),
                                                     real_fdatasync(fd)))
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    writer = store.open_writer("data/seg")
    writer.write_at(0, [b"a" * 600])
    assert not background  # below the stretch
    writer.write_at(600, [b"b" * 600])
    writer._join_sync()  # the test waits for it; a producer would go on encoding
    assert background == ["tgb-writeback"]
    writer.write_at(1200, [b"c" * 500])  # 500 since the last sync started: none
    writer._join_sync()
    assert background == ["tgb-writeback"]
    writer.write_at(1700, [b"d" * 600])
    writer.commit()
    assert background == ["tgb-writeback"] * 2 and len(synced) == 2  # the file, then its directory
    assert store.get("data/seg") == b"a" * 600 + b"b" * 600 + b"c" * 500 + b"d" * 600


def test_a_failed_background_sync_fails_the_commit(root, monkeypatch):
    """An I/O error seen by a background sync is not lost: the commit raises it and publishes nothing."""
    monkeypatch.setattr(local_writer, "WRITEBACK_BYTES", 100)
    store = LocalStore(root / "ns")
    store.put("keep", b"old")

    def broken(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken)
    writer = store.open_writer("keep")
    writer.write_at(0, [b"x" * 200])
    with pytest.raises(StorageError, match="keep"):
        writer.commit()
    assert store.get("keep") == b"old"
    assert os.listdir(root / "ns") == ["keep"]  # the temp file went with the failed commit


def test_a_writer_without_fsync_starts_no_background_sync(root, monkeypatch):
    monkeypatch.setattr(local_writer, "WRITEBACK_BYTES", 100)
    monkeypatch.setattr(os, "fdatasync", lambda fd: pytest.fail("fsync=False syncs nothing"))
    writer = LocalStore(root / "ns", fsync=False).open_writer("seg")
    writer.write_at(0, [b"x" * 500])
    writer.write_at(500, [b"y" * 500])
    writer.commit()


def test_disk_full_mid_writer_publishes_nothing(root, monkeypatch):
    store = LocalStore(root / "ns")
    store.put("keep", b"old")
    writer = store.open_writer("keep")
    writer.write_at(0, [b"first part"])

    def full(fd, buffers, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(StorageFull, match="keep"):
        writer.write_at(10, [b"second part"])
    monkeypatch.undo()
    writer.abort()
    assert store.get("keep") == b"old"
    assert os.listdir(root / "ns") == ["keep"]  # the temp file went with the failed write


def test_a_writer_dropped_without_commit_leaves_no_file(root):
    store = LocalStore(root / "ns")
    writer = store.open_writer("gone")
    writer.write_at(0, [b"x" * 100])
    del writer  # an exception unwound past it
    assert os.listdir(root / "ns") == []


def test_file_system_without_hard_links_is_refused(root, monkeypatch):
    store = LocalStore(root / "ns")

    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    with pytest.raises(ConditionalWriteUnsupported, match="hard links"):
        store.put_if_absent("k", b"v")
    monkeypatch.undo()
    assert os.listdir(root / "ns") == []


def test_missing_root_reads_as_empty_and_is_created_on_write(tmp_path):
    store = LocalStore(tmp_path / "not" / "yet")
    assert store.list() == []
    with pytest.raises(ObjectNotFound):
        store.get("k")
    store.put("k", b"v")
    assert store.get("k") == b"v"


def test_directories_are_not_objects(root):
    store = LocalStore(root / "ns")
    store.put("dir/k", b"v")
    for op in (lambda: store.get("dir"), lambda: store.stat("dir"), lambda: store.get_range("dir", 0, 1)):
        with pytest.raises(ObjectNotFound, match="dir"):
            op()
    assert not store.exists("dir")
    store.delete("dir")  # idempotent, and does not remove the prefix's objects
    assert store.get("dir/k") == b"v"


def test_local_path_can_be_memory_mapped(root):
    store = LocalStore(f"file://{root / 'ns'}")
    payload = bytes(range(256)) * 16
    store.put("obj", payload)
    path = store.local_path("obj")
    assert path == str(root / "ns" / "obj")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert m[100:200] == payload[100:200]


def test_large_range_read(root):
    store = LocalStore(root / "ns", fsync=False)
    payload = os.urandom(3 << 20)
    store.put("big", payload)
    assert store.get_range("big", 12345, 3 << 20) == payload[12345:]


def test_get_ranges_small_and_large_batches_agree(root):
    from torch_tgb.errors import ObjectNotFound as Missing
    from torch_tgb.storage import RangeFailure, RangeRequest

    store = LocalStore(root / "ns", fsync=False)
    payload = os.urandom(3 << 20)
    store.put("big", payload)
    small = [RangeRequest("big", i * 1000, i * 1000 + 500) for i in range(50)]
    large = [RangeRequest("big", (i * 100_003) % (2 << 20), (i * 100_003) % (2 << 20) + (1 << 20)) for i in range(20)]
    for requests in (small, large):  # sequential path, then the thread pool (> 16 MiB)
        assert store.get_ranges(requests) == [payload[r.start : r.end] for r in requests]
    mixed = [*large, RangeRequest("missing", 0, 1)]
    results = store.get_ranges(mixed, continue_on_error=True)
    assert isinstance(results[-1], RangeFailure) and isinstance(results[-1].error, Missing)
    assert results[:-1] == [payload[r.start : r.end] for r in large]


def test_directory_sync_failure_after_create_is_ambiguous_and_resolved_by_retry(root, monkeypatch):
    from torch_tgb.errors import AmbiguousWriteError
    from torch_tgb.storage import RetryingStore, RetryPolicy

    store = LocalStore(root / "ns")
    calls = {"n": 0}
    real_sync = LocalStore._sync_dir

    def failing_once(self, path):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.EIO, "I/O error")
        real_sync(self, path)

    monkeypatch.setattr(LocalStore, "_sync_dir", failing_once)
    with pytest.raises(AmbiguousWriteError, match="k1"):
        store.put_if_absent("k1", b"mine")
    assert store.get("k1") == b"mine"  # it was published
    calls["n"] = 0
    retrying = RetryingStore(store, RetryPolicy(attempts=3), sleep=lambda s: None)
    assert retrying.put_if_absent("k2", b"mine") is True  # the retry reads our bytes back
