"""The exception translation table and the conditional-write probe."""

from __future__ import annotations

import errno
import uuid

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from torch_tgb.errors import (
    AmbiguousWriteError,
    ConditionalWriteUnsupported,
    ObjectNotFound,
    StorageError,
    StorageFull,
    TransientStorageError,
)
from torch_tgb.storage import (
    CAPABILITIES_KEY,
    FsspecStore,
    MemoryStore,
    ensure_conditional_writes,
    open_store,
)
from torch_tgb.storage._errors import is_transient, translate


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


def wrapped(code: str) -> OSError:
    """What s3fs raises: an OSError whose cause is the botocore ClientError."""
    err = OSError(errno.EIO, f"translated {code}")
    err.__cause__ = client_error(code)
    return err


@pytest.mark.parametrize(
    "exc,write_sent,expected",
    [
        (FileNotFoundError("x"), False, ObjectNotFound),
        (client_error("NoSuchKey", 404), False, ObjectNotFound),
        (OSError(errno.ENOSPC, "full"), False, StorageFull),
        (OSError(errno.EDQUOT, "quota"), False, StorageFull),
        (PermissionError("denied"), False, StorageError),
        (client_error("AccessDenied", 403), False, StorageError),
        (TimeoutError("t"), False, TransientStorageError),
        (TimeoutError("t"), True, AmbiguousWriteError),
        (ReadTimeoutError(endpoint_url="http://h"), True, AmbiguousWriteError),
        (EndpointConnectionError(endpoint_url="http://h"), True, TransientStorageError),
        (client_error("SlowDown", 503), False, TransientStorageError),
        (client_error("InternalError", 500), False, TransientStorageError),
        (client_error("ConditionalRequestConflict", 409), True, TransientStorageError),
        (wrapped("SlowDown"), False, TransientStorageError),
        (OSError(errno.EBUSY, "busy"), False, TransientStorageError),
        (ConnectionResetError("reset"), False, TransientStorageError),
        (ValueError("weird"), False, StorageError),
    ],
)
def test_translation_table(exc, write_sent, expected):
    error = translate(exc, url="s3://b/ns", op="put", key="a/b", write_sent=write_sent)
    assert type(error) is expected
    assert "s3://b/ns" in str(error) and "'a/b'" in str(error)
    assert is_transient(exc) == issubclass(expected, TransientStorageError)


def test_permanent_errors_are_not_transient():
    for exc in (FileNotFoundError("x"), PermissionError("p"), OSError(errno.ENOSPC, "f")):
        assert not is_transient(exc)


def test_messages_never_contain_credentials(s3_server):
    url, options = s3_server.namespace("creds")
    options = {**options, "key": "AKIA-TOPSECRET-ID", "secret": "s3cr3t-value-xyz"}
    store = open_store(url.replace("s3://", "s3://user:pw-in-url@"), options)
    messages = [repr(store), store.url]
    for op in (lambda: store.get("missing"), lambda: store.stat("missing"), lambda: store.get("../x")):
        with pytest.raises(StorageError) as info:
            op()
        messages.append(str(info.value))
    for text in messages:
        for secret in ("TOPSECRET", "s3cr3t", "pw-in-url"):
            assert secret not in text, text


# --- ensure_conditional_writes ------------------------------------------------------------


class IgnoresCondition(MemoryStore):
    """An S3 clone that accepts If-None-Match and overwrites anyway."""

    def put_if_absent(self, key, data):
        self.put(key, data)
        return True


class LiesAboutLosing(MemoryStore):
    """Reports a loss but has overwritten the object."""

    def put_if_absent(self, key, data):
        existed = self.exists(key)
        self.put(key, data)
        return not existed


class CountingStore(MemoryStore):
    def __init__(self, name):
        super().__init__(name)
        self.conditional_puts = 0

    def put_if_absent(self, key, data):
        self.conditional_puts += 1
        return super().put_if_absent(key, data)


@pytest.mark.parametrize("fake", [IgnoresCondition, LiesAboutLosing])
def test_probe_refuses_store_that_ignores_condition(fake):
    store = fake(f"fake-{uuid.uuid4().hex}")
    with pytest.raises(ConditionalWriteUnsupported, match=store.url):
        ensure_conditional_writes(store)
    assert store.list() == []  # no cached verdict, no probe left behind
    with pytest.raises(ConditionalWriteUnsupported):
        ensure_conditional_writes(store)  # refused again, not silently used
    store.destroy()


def test_probe_result_is_cached_in_namespace():
    store = CountingStore(f"probe-{uuid.uuid4().hex}")
    ensure_conditional_writes(store)
    assert store.conditional_puts == 2
    assert store.list() == [CAPABILITIES_KEY]
    ensure_conditional_writes(store)
    ensure_conditional_writes(CountingStore(store.name))
    assert store.conditional_puts == 2  # the second writer only read the cache
    store.put(CAPABILITIES_KEY, b"{not json")
    ensure_conditional_writes(store)  # a damaged cache is re-probed and rewritten
    assert store.conditional_puts == 4
    store.destroy()


@pytest.mark.s3
def test_probe_passes_on_s3(s3_namespace):
    store = open_store(*s3_namespace)
    ensure_conditional_writes(store)
    assert store.list() == [CAPABILITIES_KEY]


def test_fsspec_protocol_without_conditional_create_is_refused():
    store = FsspecStore(f"memory://fsspec-{uuid.uuid4().hex}")
    store.put("k", b"v")
    assert store.get("k") == b"v"
    with pytest.raises(ConditionalWriteUnsupported, match="memory"):
        store.put_if_absent("k2", b"v")
    with pytest.raises(ConditionalWriteUnsupported):
        ensure_conditional_writes(store)


def test_tracebacks_never_print_url_credentials(s3_server):
    import traceback

    url, options = s3_server.namespace("creds-tb")
    store = open_store(url.replace("s3://", "s3://user:pw-in-url@"), options)
    with pytest.raises(StorageError) as info:
        store.get("missing")
    printed = "".join(traceback.format_exception(info.value))
    assert "pw-in-url" not in printed


def test_s3_has_one_retry_layer_and_options_are_not_mutated(s3_server):
    url, options = s3_server.namespace("retry-layer")
    options["config_kwargs"] = {"connect_timeout": 5, "retries": {"total_max_attempts": 1}}
    before = repr(options)
    store = FsspecStore(url, options)
    assert repr(options) == before  # botocore must not write into the caller's dicts
    assert store.fs.retries == 1  # s3fs's hidden retry loop is off; RetryingStore retries


def test_dead_endpoint_is_transient_and_names_namespace_and_key():
    import socket

    from torch_tgb.storage import RetryPolicy

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "k", "secret": "s"}
    store = open_store("s3://nobucket/ns", options, retry=RetryPolicy(attempts=2, base_delay=0.01))
    with pytest.raises(TransientStorageError) as info:
        store.get("some/key")
    assert "s3://nobucket/ns" in str(info.value) and "some/key" in str(info.value)
    assert "2 attempts" in str(info.value)


def test_forwarding_store_keeps_the_local_mmap_path(tmp_path):
    from torch_tgb.storage import ForwardingStore, LocalStore

    inner = LocalStore(str(tmp_path))
    inner.put("data/x.bin", b"abc")
    wrapped = ForwardingStore(inner)
    assert wrapped.local_path("data/x.bin") == inner.local_path("data/x.bin") is not None
