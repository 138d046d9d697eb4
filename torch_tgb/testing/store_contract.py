"""The conformance suite every :class:`ObjectStore` must pass.

Subclass :class:`StoreContract` in a test module and provide a ``store``
fixture returning a fresh, empty store (zarr's ``StoreTests`` is the model)::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            return MyStore(tmp_path)

Every test here uses only the public interface, so the suite also checks
wrappers (``RetryingStore``, a fault-free ``FaultyStore``...). Backend
specifics (symlinks on disk, credential-free URLs) belong in the subclass.
The create-if-absent race runs in threads and in separate processes (the
store is pickled into each, as DataLoader workers and producers receive
it); a store that lives in one process sets ``race_processes = 0``.
"""

from __future__ import annotations

import multiprocessing as mp
import threading

import pytest

from torch_tgb.errors import InvalidKey, ObjectNotFound, StorageError, TGBError
from torch_tgb.storage import ObjectStore, RangeFailure, RangeRequest

__all__ = ["BAD_KEYS", "StoreContract"]

#: keys every store must refuse with InvalidKey
BAD_KEYS = [
    "",
    "/abs/key",
    "../escape",
    "a/../../b",
    "a/./b",
    "a//b",
    "a/",
    "s3://bucket/key",
    "file:///etc/passwd",
    "~/home",
    "a\\b",
    "nul\x00byte",
    "x" * 1025,
]

_PAYLOAD = bytes(range(256)) * 40  # 10 KiB with every byte value


class StoreContract:
    """Reusable tests of the ObjectStore contract (see ``docs/internals.md``)."""

    #: concurrent writers in the create-if-absent race (lower it for slow servers)
    race_threads = 8
    #: writer processes in the cross-process race (0: the store cannot be shared between processes)
    race_processes = 4

    @pytest.fixture
    def store(self) -> ObjectStore:
        raise NotImplementedError("subclasses provide a fresh, empty store")

    # --- put / get ---------------------------------------------------------------

    def test_put_get_roundtrip(self, store: ObjectStore) -> None:
        store.put("a/b/obj.bin", _PAYLOAD)
        assert store.get("a/b/obj.bin") == _PAYLOAD

    def test_put_overwrites(self, store: ObjectStore) -> None:
        store.put("k", b"first")
        store.put("k", b"second, longer")
        assert store.get("k") == b"second, longer"
        store.put("k", b"3")
        assert store.get("k") == b"3"

    def test_put_accepts_memoryview_and_bytearray(self, store: ObjectStore) -> None:
        store.put("mv", memoryview(_PAYLOAD)[10:20])
        store.put("ba", bytearray(b"bytearray"))
        assert store.get("mv") == _PAYLOAD[10:20]
        assert store.get("ba") == b"bytearray"

    def test_unusual_but_valid_keys(self, store: ObjectStore) -> None:
        keys = ["with space/x y.bin", "unicode/\u00fc\u00df.bin", "dots/a.b.c", "_tgb/log/00000000000000000001.json"]
        for i, key in enumerate(keys):
            store.put(key, str(i).encode())
        assert [store.get(k) for k in keys] == [b"0", b"1", b"2", b"3"]
        assert store.list() == sorted(keys)

    def test_missing_key_names_namespace_and_key(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFound) as info:
            store.get("no/such/key")
        assert "no/such/key" in str(info.value)
        assert store.url in str(info.value)
        assert isinstance(info.value, FileNotFoundError)

    def test_zero_length_object(self, store: ObjectStore) -> None:
        store.put("empty", b"")
        assert store.get("empty") == b""
        assert store.size("empty") == 0
        assert store.exists("empty")
        assert store.get_range("empty", 0, 0) == b""
        assert store.get_range("empty", 0, 10) == b""
        assert store.list() == ["empty"]

    # --- objects written in parts (open_writer) -----------------------------------

    def test_writer_publishes_its_parts_on_commit_only(self, store: ObjectStore) -> None:
        writer = store.open_writer("parts/obj.bin", size_hint=1 << 16)
        assert writer.write_at(0, [_PAYLOAD[:100], memoryview(_PAYLOAD)[100:300]]) == 300
        assert writer.write_at(8192, [bytearray(_PAYLOAD[:50])]) == 8242  # a gap reads as zeros
        assert writer.size == 8242
        assert not store.exists("parts/obj.bin") and store.list() == []  # nothing before the commit
        writer.commit()
        assert store.get("parts/obj.bin") == _PAYLOAD[:300] + bytes(8192 - 300) + _PAYLOAD[:50]
        assert store.list() == ["parts/obj.bin"]

    def test_writer_commit_replaces_and_abort_leaves_nothing(self, store: ObjectStore) -> None:
        store.put("w", b"old")
        writer = store.open_writer("w")
        writer.write_at(0, [b"new bytes"])
        writer.commit()
        assert store.get("w") == b"new bytes"
        dropped = store.open_writer("never")
        dropped.write_at(0, [_PAYLOAD])
        dropped.abort()
        dropped.abort()  # twice is harmless
        assert not store.exists("never") and store.list() == ["w"]

    def test_writer_copies_its_buffers(self, store: ObjectStore) -> None:
        data = bytearray(b"before")
        writer = store.open_writer("copied")
        writer.write_at(0, [data])
        data[:] = b"AFTER!"  # the caller reuses its buffer once write_at returns
        writer.commit()
        assert store.get("copied") == b"before"

    def test_writer_refuses_bad_keys(self, store: ObjectStore) -> None:
        with pytest.raises(InvalidKey):
            store.open_writer("../escape").commit()

    # --- ranges ------------------------------------------------------------------

    def test_get_range_inside(self, store: ObjectStore) -> None:
        store.put("r", _PAYLOAD)
        assert store.get_range("r", 0, 1) == _PAYLOAD[:1]
        assert store.get_range("r", 100, 5000) == _PAYLOAD[100:5000]
        assert store.get_range("r", 0, len(_PAYLOAD)) == _PAYLOAD

    def test_get_range_past_end_is_short(self, store: ObjectStore) -> None:
        store.put("r", _PAYLOAD)
        n = len(_PAYLOAD)
        assert store.get_range("r", n - 3, n + 100) == _PAYLOAD[-3:]
        assert store.get_range("r", n, n + 10) == b""
        assert store.get_range("r", n + 5, n + 10) == b""

    def test_get_range_empty(self, store: ObjectStore) -> None:
        store.put("r", _PAYLOAD)
        assert store.get_range("r", 7, 7) == b""
        with pytest.raises(ObjectNotFound):
            store.get_range("missing", 3, 3)

    def test_get_range_missing_key(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFound, match="missing"):
            store.get_range("missing", 0, 10)

    @pytest.mark.parametrize("start,end", [(-1, 5), (5, 4)])
    def test_get_range_invalid(self, store: ObjectStore, start: int, end: int) -> None:
        store.put("r", _PAYLOAD)
        with pytest.raises(ValueError):
            store.get_range("r", start, end)

    # --- stat / exists -----------------------------------------------------------

    def test_stat_size_exists(self, store: ObjectStore) -> None:
        assert not store.exists("s/obj")
        store.put("s/obj", _PAYLOAD)
        info = store.stat("s/obj")
        assert (info.key, info.size) == ("s/obj", len(_PAYLOAD))
        assert info.mtime > 0
        assert store.size("s/obj") == len(_PAYLOAD)
        assert store.exists("s/obj")
        assert not store.exists("s")  # a prefix is not an object
        with pytest.raises(ObjectNotFound):
            store.stat("s/missing")
        with pytest.raises(ObjectNotFound):
            store.size("s")

    # --- list --------------------------------------------------------------------

    def test_list_empty(self, store: ObjectStore) -> None:
        assert store.list() == []
        assert store.list("nothing/") == []

    def test_list_prefixes(self, store: ObjectStore) -> None:
        keys = ["a/1", "a/2", "a/sub/3", "ab/4", "b", "data/p0/e000001-o1.tgb", "data/p0/e000002-o1.tgb"]
        for key in reversed(keys):
            store.put(key, b"x")
        assert store.list() == sorted(keys)
        assert store.list("a/") == ["a/1", "a/2", "a/sub/3"]
        assert store.list("a") == ["a/1", "a/2", "a/sub/3", "ab/4"]
        assert store.list("a/s") == ["a/sub/3"]
        assert store.list("data/p0/e000001") == ["data/p0/e000001-o1.tgb"]
        assert store.list("b") == ["b"]
        assert store.list("c") == []

    # --- put_if_absent -----------------------------------------------------------

    def test_put_if_absent(self, store: ObjectStore) -> None:
        assert store.put_if_absent("once", b"winner") is True
        assert store.put_if_absent("once", b"loser") is False
        assert store.get("once") == b"winner"
        store.delete("once")
        assert store.put_if_absent("once", b"again") is True
        assert store.get("once") == b"again"

    def test_put_if_absent_concurrent_threads(self, store: ObjectStore) -> None:
        n = self.race_threads
        for round_ in range(3):
            key = f"race/{round_}"
            barrier = threading.Barrier(n)
            outcome: dict[int, bool | BaseException] = {}

            def writer(i: int, key: str = key, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                try:
                    outcome[i] = store.put_if_absent(key, f"writer-{i}".encode() * 100)
                except BaseException as e:  # reported below
                    outcome[i] = e

            threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            winners = [i for i, won in outcome.items() if won is True]
            assert len(outcome) == n and all(isinstance(v, bool) for v in outcome.values()), outcome
            assert len(winners) == 1, outcome
            assert store.get(key) == f"writer-{winners[0]}".encode() * 100

    def test_put_if_absent_concurrent_processes(self, store: ObjectStore) -> None:
        n = self.race_processes
        if n < 2:
            pytest.skip("the store lives in one process")
        ctx = mp.get_context("spawn")  # a fresh interpreter: no client or lock inherited by fork
        barrier, results = ctx.Barrier(n), ctx.Queue()
        keys = [f"xrace/{k}" for k in range(3)]
        procs = [ctx.Process(target=_race_writer, args=(store, keys, i, barrier, results)) for i in range(n)]
        for p in procs:
            p.start()
        reports = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        errors = [r for r in reports if isinstance(r[1], str)]
        assert not errors, errors
        for key in keys:
            winners = [i for i, won in reports if key in won]
            assert len(winners) == 1, (key, reports)
            assert store.get(key) == _race_payload(winners[0])

    # --- delete ------------------------------------------------------------------

    def test_delete_idempotent(self, store: ObjectStore) -> None:
        store.put("d/1", b"1")
        store.put("d/2", b"2")
        store.put("d/3", b"3")
        store.delete("d/1")
        store.delete("d/1")
        store.delete(["d/2", "d/3", "d/never"])
        store.delete([])
        assert store.list() == []
        assert not store.exists("d/2")

    # --- keys ----------------------------------------------------------------------

    @pytest.mark.parametrize("bad", BAD_KEYS, ids=lambda k: repr(k)[:20])
    def test_bad_keys_refused_everywhere(self, store: ObjectStore, bad: str) -> None:
        operations = [
            lambda: store.get(bad),
            lambda: store.get_range(bad, 0, 1),
            lambda: store.stat(bad),
            lambda: store.exists(bad),
            lambda: store.put(bad, b"x"),
            lambda: store.put_if_absent(bad, b"x"),
            lambda: store.delete(bad),
            lambda: store.delete(["fine", bad]),
            lambda: store.get_ranges([RangeRequest(bad, 0, 1)]),
        ]
        for op in operations:
            with pytest.raises(InvalidKey) as info:
                op()
            assert repr(bad[:80])[1:-1][:20] in str(info.value)
        assert store.list() == []

    def test_non_string_key_refused(self, store: ObjectStore) -> None:
        with pytest.raises(InvalidKey):
            store.get(b"bytes-key")  # type: ignore[arg-type]

    def test_list_bad_prefix(self, store: ObjectStore) -> None:
        for bad in ("../", "/abs", "a//"):
            with pytest.raises(InvalidKey):
                store.list(bad)

    # --- get_ranges ----------------------------------------------------------------

    def test_get_ranges_in_request_order(self, store: ObjectStore) -> None:
        store.put("g/a", _PAYLOAD)
        store.put("g/b", _PAYLOAD[::-1])
        requests = [RangeRequest("g/b" if i % 3 == 0 else "g/a", i * 37, i * 37 + 100) for i in range(40)]
        expected = [(_PAYLOAD[::-1] if r.key == "g/b" else _PAYLOAD)[r.start : r.end] for r in requests]
        assert store.get_ranges(requests) == expected
        assert store.get_ranges([]) == []

    def test_get_ranges_errors(self, store: ObjectStore) -> None:
        store.put("g/a", _PAYLOAD)
        n = len(_PAYLOAD)
        requests = [
            RangeRequest("g/a", 0, 10),
            RangeRequest("g/missing", 0, 10),
            RangeRequest("g/a", n - 2, n + 10),
            RangeRequest("g/a", 5, 5),
            RangeRequest("g/a", n + 1, n + 2),
        ]
        with pytest.raises(ObjectNotFound, match="g/missing"):
            store.get_ranges(requests)
        results = store.get_ranges(requests, continue_on_error=True)
        assert results[0] == _PAYLOAD[:10]
        failure = results[1]
        assert isinstance(failure, RangeFailure) and not failure
        assert failure.request == requests[1]
        assert isinstance(failure.error, ObjectNotFound) and isinstance(failure.error, TGBError)
        assert results[2:] == [_PAYLOAD[-2:], b"", b""]

    def test_errors_are_storage_errors(self, store: ObjectStore) -> None:
        with pytest.raises(StorageError):
            store.get("missing")


def _race_payload(writer: int) -> bytes:
    return f"process-{writer}".encode() * 200


def _race_writer(store: ObjectStore, keys: list[str], writer: int, barrier, results) -> None:  # type: ignore[no-untyped-def]
    """One process of the cross-process race: ``(writer, keys won)`` or ``(writer, error)``."""
    try:
        won = []
        for key in keys:
            barrier.wait(60)  # every process hits the same key at once
            if store.put_if_absent(key, _race_payload(writer)):
                won.append(key)
        results.put((writer, won))
    except BaseException as e:  # reported to the parent instead of hanging its barrier
        barrier.abort()
        results.put((writer, repr(e)))
