"""put_if_absent races: 16 processes on local disk, 16 threads against S3, GCS and Azure (emulators).

Exactly one writer wins each key, the object holds the winner's complete
content, and a reader polling during the race never sees a partial object.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import threading

import pytest

from torch_tgb.errors import ObjectNotFound
from torch_tgb.storage import LocalStore, open_store

WRITERS = 16
LOCAL_KEYS = 200
S3_KEYS = 12  # moto serves ~150 requests/s on 2 cores
SIZE = 128 * 1024  # large enough that a non-atomic publish would be caught mid-write
BARRIER_TIMEOUT = 120.0


def _key(k: int) -> str:
    return f"race/{k:04d}"


def _content(k: int, writer: int, size: int) -> bytes:
    header = f"key={k:04d};writer={writer:02d};".encode()
    return header + bytes([65 + writer]) * (size - len(header))


def _check(k: int, data: bytes, size: int) -> str | None:
    """None if ``data`` is some writer's complete content for key ``k``."""
    try:
        writer = int(data[len(f"key={k:04d};writer=") :][:2])
    except ValueError:
        return f"key {k}: unreadable header {data[:30]!r} ({len(data)} bytes)"
    if data != _content(k, writer, size):
        return f"key {k}: partial or mixed object ({len(data)} of {size} bytes, writer {writer})"
    return None


def _writer(root: str, writer: int, n_keys: int, size: int, barrier, results) -> None:  # type: ignore[no-untyped-def]
    store = LocalStore(root, fsync=False)
    won = []
    try:
        for k in range(n_keys):
            payload = _content(k, writer, size)
            barrier.wait(BARRIER_TIMEOUT)  # all 16 hit the same key at once
            if store.put_if_absent(_key(k), payload):
                won.append(k)
        results.put(("writer", writer, won))
    except BaseException as e:  # surface the failure instead of hanging the barrier
        barrier.abort()
        results.put(("error", writer, repr(e)))


def _reader(root: str, n_keys: int, size: int, stop, results) -> None:  # type: ignore[no-untyped-def]
    store = LocalStore(root)
    reads, problems, k = 0, [], 0
    # Poll the race frontier: the first key not yet seen complete.
    while k < n_keys and not stop.is_set():
        try:
            data = store.get(_key(k))
        except ObjectNotFound:
            continue
        reads += 1
        problem = _check(k, data, size)
        if problem:
            problems.append(problem)
        k += 1
    results.put(("reader", reads, problems))


@pytest.mark.slow
def test_put_if_absent_race_16_processes_local(tmp_path):
    ctx = mp.get_context("spawn")  # no fork: the test process may run server threads
    barrier = ctx.Barrier(WRITERS)
    results = ctx.Queue()
    stop = ctx.Event()
    root = str(tmp_path / "ns")
    reader = ctx.Process(target=_reader, args=(root, LOCAL_KEYS, SIZE, stop, results))
    writers = [
        ctx.Process(target=_writer, args=(root, w, LOCAL_KEYS, SIZE, barrier, results)) for w in range(WRITERS)
    ]
    reader.start()
    for p in writers:
        p.start()
    messages = []
    while sum(m[0] != "reader" for m in messages) < WRITERS:
        messages.append(results.get(timeout=300))
    stop.set()  # the reader may still wait for a key if a writer failed
    if not any(m[0] == "reader" for m in messages):
        messages.append(results.get(timeout=60))
    for p in [*writers, reader]:
        p.join(timeout=60)
        assert p.exitcode == 0
    reports = [m for m in messages if m[0] != "reader"]
    (reader_report,) = [m for m in messages if m[0] == "reader"]

    errors = [r for r in reports if r[0] == "error"]
    assert not errors, errors
    winners: dict[int, list[int]] = {k: [] for k in range(LOCAL_KEYS)}
    for _, writer, won in reports:
        for k in won:
            winners[k].append(writer)
    assert all(len(w) == 1 for w in winners.values()), {k: w for k, w in winners.items() if len(w) != 1}
    store = LocalStore(root)
    for k, (writer,) in winners.items():
        assert store.get(_key(k)) == _content(k, writer, SIZE)
    assert store.list() == [_key(k) for k in range(LOCAL_KEYS)]
    _, reads, problems = reader_report
    assert problems == []
    assert reads > 0  # the reader really observed objects during the race


@pytest.mark.slow
def test_put_if_absent_race_16_threads_cloud(cloud_namespace):
    url, options = cloud_namespace
    size = 4096
    # open_store: RetryingStore(FsspecStore); equal options share one s3fs client
    stores = [open_store(url, options) for _ in range(WRITERS)]
    barrier = threading.Barrier(WRITERS)
    won: dict[int, list[int]] = {k: [] for k in range(S3_KEYS)}
    failures: queue_mod.Queue[str] = queue_mod.Queue()
    lock = threading.Lock()

    def writer(w: int) -> None:
        try:
            for k in range(S3_KEYS):
                barrier.wait(BARRIER_TIMEOUT)
                if stores[w].put_if_absent(_key(k), _content(k, w, size)):
                    with lock:
                        won[k].append(w)
        except BaseException as e:
            barrier.abort()
            failures.put(repr(e))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures.empty(), failures.get()
    assert all(len(w) == 1 for w in won.values()), won
    for k, (w,) in won.items():
        assert stores[0].get(_key(k)) == _content(k, w, size)
