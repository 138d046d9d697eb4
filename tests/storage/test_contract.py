"""Every backend and wrapper passes the shared ObjectStore contract."""

from __future__ import annotations

import uuid

import pytest

from torch_tgb.storage import (
    AzureBlobStore,
    FsspecStore,
    GCSStore,
    LocalStore,
    MemoryStore,
    RetryingStore,
    open_store,
)
from torch_tgb.errors import StorageError, TransientStorageError
from torch_tgb.testing.store_contract import StoreContract


class TestLocalStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        return LocalStore(tmp_path / "ns")


class TestLocalStoreNoFsync(StoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        return LocalStore(tmp_path, fsync=False)


class TestMemoryStore(StoreContract):
    race_processes = 0

    @pytest.fixture
    def store(self):
        store = MemoryStore(f"contract-{uuid.uuid4().hex}")
        yield store
        store.destroy()


@pytest.mark.s3
class TestS3Store(StoreContract):
    race_threads = 4  # moto is slow; the 16-thread race lives in test_races.py

    @pytest.fixture
    def store(self, s3_namespace):
        url, options = s3_namespace
        # retries absorb a rare moto hiccup; they cannot mask a contract violation
        return RetryingStore(FsspecStore(url, options))


@pytest.mark.gcs
class TestGCSStore(StoreContract):
    """fake-gcs-server: the create is ``ifGenerationMatch=0``."""

    @pytest.fixture
    def store(self, gcs_namespace):
        store = open_store(*gcs_namespace)  # RetryingStore(GCSStore), what users get
        assert isinstance(store.inner, GCSStore)
        return store


@pytest.mark.azure
class TestAzureBlobStore(StoreContract):
    """Azurite: the create is ``If-None-Match: *``."""

    @pytest.fixture
    def store(self, azure_namespace):
        store = open_store(*azure_namespace)
        assert isinstance(store.inner, AzureBlobStore)
        return store


class TestOpenStoreLocal(StoreContract):
    """What users get from open_store: RetryingStore around LocalStore."""

    @pytest.fixture
    def store(self, tmp_path):
        store = open_store(str(tmp_path))
        assert isinstance(store, RetryingStore)
        return store


class TestFaultFreeFaultyStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        from torch_tgb.storage import FaultyStore

        return FaultyStore(LocalStore(tmp_path, fsync=False))


class TestZeroLatencyStore(StoreContract):
    race_processes = 0  # over a MemoryStore

    @pytest.fixture
    def store(self):
        from torch_tgb.storage import LatencyStore

        inner = MemoryStore(f"latency-{uuid.uuid4().hex}")
        yield LatencyStore(inner, rtt=0.0, bandwidth=0)
        inner.destroy()


@pytest.mark.s3
def test_two_s3_stores_see_each_others_writes_at_once(s3_namespace):
    url, options = s3_namespace
    a, b = FsspecStore(url, options), FsspecStore(url, options)
    assert b.list() == []
    a.put("x/1", b"1")
    assert b.list() == ["x/1"] and b.exists("x/1")
    assert not b.put_if_absent("x/1", b"2")
    a.delete("x/1")
    assert b.list() == [] and not b.exists("x/1")
    b.put("x/1", b"3")
    assert a.get("x/1") == b"3" and a.size("x/1") == 1


def _get_in_child(store, key, results):  # type: ignore[no-untyped-def]
    try:
        results.put(store.get(key))
    except BaseException as e:
        results.put(repr(e))


@pytest.mark.s3
def test_s3_store_survives_pickle_and_fork(s3_namespace):
    """DataLoader workers receive stores by pickling (spawn) or inherit them (fork)."""
    import multiprocessing as mp
    import pickle

    store = open_store(*s3_namespace)
    store.put("k", b"shared")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.get("k") == b"shared" and clone.url == store.url
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_get_in_child, args=(store, "k", results))
    child.start()
    assert results.get(timeout=60) == b"shared"
    child.join(timeout=30)
    assert store.get("k") == b"shared"  # the parent's client still works


def test_local_and_wrapped_stores_pickle(tmp_path):
    import pickle

    from torch_tgb.storage import FaultyStore, LatencyStore

    store = open_store(str(tmp_path))
    store.put("k", b"v")
    for s in (store, FaultyStore(LocalStore(tmp_path)), LatencyStore(LocalStore(tmp_path), rtt=0)):
        assert pickle.loads(pickle.dumps(s)).get("k") == b"v"


@pytest.mark.s3
@pytest.mark.parametrize(("code", "error"), [("SlowDown", TransientStorageError), ("AccessDenied", StorageError)])
def test_s3_delete_raises_for_keys_deleteobjects_refused_inside_a_200(s3_namespace, code, error, monkeypatch):
    """DeleteObjects answers 200 with an ``Errors`` list: those keys are not deleted, and the caller must know.

    (s3fs's bulk delete sends Quiet and ignores the list: the Reclaimer would
    have counted them as reclaimed.)
    """
    store = FsspecStore(*s3_namespace)
    for key in ("a", "b", "c"):
        store.put(key, b"x")
    real = store.fs._call_s3

    async def refuse_b(method, *args, **kwargs):  # type: ignore[no-untyped-def]
        if method != "delete_objects":
            return await real(method, *args, **kwargs)
        objects = kwargs["Delete"]["Objects"]
        kept = [o for o in objects if o["Key"].endswith("/b")]
        kwargs["Delete"] = {**kwargs["Delete"], "Objects": [o for o in objects if o not in kept]}
        out = await real(method, *args, **kwargs)
        return {**out, "Errors": [{"Key": o["Key"], "Code": code, "Message": "refused"} for o in kept]}

    monkeypatch.setattr(store.fs, "_call_s3", refuse_b)
    with pytest.raises(error, match=f"1 key\\(s\\) not deleted, the first .*b'.*{code}"):
        store.delete(["a", "b", "c"])
    monkeypatch.undo()
    assert store.list() == ["b"]  # the others went; "b" is still there, as the error says
    store.delete(["b", "never-there"])  # and a retry deletes it; a missing key is no error
    assert store.list() == []
