"""open_store picks the backend from the URL and wraps it in RetryingStore."""

from __future__ import annotations

import pytest

from torch_tgb.storage import (
    FsspecStore,
    LocalStore,
    MemoryStore,
    RetryingStore,
    open_store,
)


def test_bare_path_and_file_url_are_local(tmp_path):
    for url in (str(tmp_path), f"file://{tmp_path}", tmp_path):
        store = open_store(url)
        assert isinstance(store, RetryingStore)
        assert isinstance(store.inner, LocalStore)
        assert store.url == f"file://{tmp_path.resolve()}"
        assert store.local_path("a/b") == str(tmp_path.resolve() / "a" / "b")


def test_memory_url(tmp_path):
    store = open_store("memory://open-store-test")
    assert isinstance(store, RetryingStore) and isinstance(store.inner, MemoryStore)
    store.put("k", b"v")
    assert open_store("memory://open-store-test").get("k") == b"v"
    store.inner.destroy()


def test_store_object_is_used_as_is():
    inner = MemoryStore("as-is")
    assert open_store(inner) is inner
    with pytest.raises(ValueError):
        open_store(inner, {"key": "x"})


def test_local_rejects_foreign_options(tmp_path):
    with pytest.raises(ValueError, match="endpoint_url"):
        open_store(str(tmp_path), {"endpoint_url": "http://x"})
    assert open_store(str(tmp_path), {"fsync": False}).inner.fsync is False


def test_s3_url_is_fsspec_and_credentials_never_in_url(s3_namespace):
    url, options = s3_namespace
    store = open_store(url, options)
    assert isinstance(store.inner, FsspecStore)
    assert store.url == url
    secret_url = url.replace("s3://", "s3://AKIDSECRET:hunter2@") + "?token=abc"
    assert FsspecStore(secret_url, options).url == url


def test_a_cached_s3_listing_is_refused() -> None:
    """The GC boundary is the highest generation a LIST shows: a cached listing could show an old one."""
    from torch_tgb.storage.fsspec_store import FsspecStore

    with pytest.raises(ValueError, match="use_listings_cache"):
        FsspecStore("s3://bucket/ns", {"use_listings_cache": True})
