"""Partial writes: what a writer killed before its commit leaves, seen by ``list_partial``, removed by ``delete_partial``.

Local: the temp file of ``open_writer`` (or ``put``) names the key it was to
become, so its owner can be judged. S3 (moto): a multipart upload left open.
"""

from __future__ import annotations

import os

import pytest

from torch_tgb.errors import InvalidKey, TGBError
from torch_tgb.storage import LocalStore, MemoryStore, PartialObject, open_store
from torch_tgb.storage._local_writer import TMP_PREFIX, temp_name, temp_target

KEY = "data/p0/e000003-o000000000010-0a1b2c3d.tgb"


def test_an_unfinished_local_write_is_a_partial_write_naming_its_key(tmp_path):
    store = LocalStore(tmp_path)
    writer = store.open_writer(KEY)
    writer.write_at(0, [b"x" * 5000])
    [partial] = store.list_partial()
    assert partial.key == KEY and partial.size == 5000
    assert partial.name.startswith(f"data/p0/{TMP_PREFIX}") and partial.name.endswith(".e000003-o000000000010-0a1b2c3d.tgb")
    assert store.list() == []  # never an object
    assert store.list_partial("data/p0/") == [partial] and store.list_partial("data/p1/") == []
    assert store.list_partial("data/p0/e000003") == [partial]  # matched against the key it was to become
    writer.commit()
    assert store.list_partial() == [] and store.list() == [KEY]


def test_delete_partial_removes_the_temp_file_only(tmp_path):
    store = LocalStore(tmp_path)
    store.put(KEY, b"published")
    writer = store.open_writer("data/p0/e000004-o000000000011-00000000.tgb")
    writer.write_at(0, [b"y" * 100])
    partials = store.list_partial()
    store.delete_partial(partials)
    store.delete_partial(partials)  # idempotent
    assert store.list_partial() == [] and store.get(KEY) == b"published"
    assert not [n for n in os.listdir(tmp_path / "data" / "p0") if n.startswith(TMP_PREFIX)]
    writer.abort()  # its file is gone already: no error


@pytest.mark.parametrize("name", [KEY, "data/p0/not-a-temp", "../outside/.tgb-tmp.x", f"data/{TMP_PREFIX}"])
def test_delete_partial_refuses_anything_but_a_temp_file(tmp_path, name):
    store = LocalStore(tmp_path)
    store.put(KEY, b"published")
    with pytest.raises(InvalidKey):
        store.delete_partial([PartialObject(KEY, name, 0, 0.0)])
    assert store.get(KEY) == b"published"


def test_a_temp_file_of_an_older_version_has_no_key(tmp_path):
    store = LocalStore(tmp_path)
    (tmp_path / "data" / "p0").mkdir(parents=True)
    (tmp_path / "data" / "p0" / f"{TMP_PREFIX}c41edb3b793e17e5").write_bytes(b"z" * 7)
    [partial] = store.list_partial("data/")
    assert partial.key is None and partial.name == f"data/p0/{TMP_PREFIX}c41edb3b793e17e5" and partial.size == 7
    store.delete_partial([partial])
    assert store.list_partial() == []


def test_temp_names_carry_their_target_unless_too_long():
    name = temp_name("e000001-o000000000000-abcd.tgb")
    assert name.startswith(TMP_PREFIX) and temp_target(name) == "e000001-o000000000000-abcd.tgb"
    long = temp_name("x" * 250)
    assert len(long) <= 255 and temp_target(long) is None
    assert temp_target(f"{TMP_PREFIX}nothex0000000000.a") is None


def test_wrappers_and_stores_without_partial_writes(tmp_path):
    wrapped = open_store(str(tmp_path))  # a RetryingStore over a LocalStore
    writer = wrapped.open_writer(KEY)
    writer.write_at(0, [b"a"])
    [partial] = wrapped.list_partial()
    wrapped.delete_partial([partial])
    assert wrapped.list_partial() == []
    memory = MemoryStore()
    memory.open_writer(KEY).write_at(0, [b"a"])  # buffered in this process: nothing is left in the store
    assert memory.list_partial() == []


def test_an_open_s3_multipart_upload_is_a_partial_write(s3_namespace):
    url, options = s3_namespace
    store = open_store(url, options)
    fs = store.inner.fs  # the s3fs file system under the RetryingStore
    root = fs._strip_protocol(store.inner.root)
    bucket, _, path = root.partition("/")
    upload = fs.call_s3("create_multipart_upload", Bucket=bucket, Key=f"{path}/{KEY}")
    fs.call_s3("upload_part", Bucket=bucket, Key=f"{path}/{KEY}", UploadId=upload["UploadId"], PartNumber=1,
               Body=b"p" * 1000)
    [partial] = store.list_partial("data/")
    assert partial.key == KEY and partial.name == upload["UploadId"] and partial.size == 1000 and partial.mtime > 0
    assert store.list() == [] and store.list_partial("_tgb/") == []
    store.delete_partial([partial])
    store.delete_partial([partial])  # aborted already: no error
    assert store.list_partial() == []


@pytest.mark.parametrize("op", ["put", "put_if_absent"])
def test_a_put_whose_temp_file_a_reclaimer_removed_is_written_again(tmp_path, monkeypatch, op):
    """A reclaimer whose clock runs far ahead may take an in-flight temp file for a killed writer's leftover."""
    store = LocalStore(tmp_path)
    write_temp = LocalStore._write_temp
    removed = []

    def racing_reclaimer(self, path, data, key, what):  # the temp file goes between its write and its rename
        tmp = write_temp(self, path, data, key, what)
        if len(removed) < 2:
            os.unlink(tmp)
            removed.append(tmp)
        return tmp

    monkeypatch.setattr(LocalStore, "_write_temp", racing_reclaimer)
    key = "_tgb/retired/c1-0123"
    assert getattr(store, op)(key, b"retired") in (None, True)
    assert len(removed) == 2 and store.get(key) == b"retired" and not store.list_partial()


def test_a_put_whose_temp_file_keeps_vanishing_fails_naming_the_key(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)
    write_temp = LocalStore._write_temp

    def always_removed(self, path, data, key, what):
        tmp = write_temp(self, path, data, key, what)
        os.unlink(tmp)
        return tmp

    monkeypatch.setattr(LocalStore, "_write_temp", always_removed)
    with pytest.raises(TGBError, match="_tgb/retired/c1"):
        store.put("_tgb/retired/c1", b"x")
    with pytest.raises(TGBError, match="_tgb/retired/c2"):
        store.put_if_absent("_tgb/retired/c2", b"x")
    assert not store.exists("_tgb/retired/c1") and not store.exists("_tgb/retired/c2")
