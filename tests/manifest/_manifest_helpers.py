"""Helpers for manifest tests: entries without real TGB objects, a request-counting store."""

from __future__ import annotations

from collections import Counter

from torch_tgb.manifest import Committer, Manifest, TGBEntry
from torch_tgb.storage import ObjectStore
from torch_tgb.testing.counting import CountingStore


def entry(producer: str, offset: int, *, size: int = 128) -> TGBEntry:
    """An entry whose object need not exist (the manifest never opens objects)."""
    return TGBEntry(f"data/{producer}/o{offset:08d}.tgb", size, size - 32, 8, producer, offset, 4, 0)


def entries(producer: str, start: int, n: int) -> list[TGBEntry]:
    return [entry(producer, o) for o in range(start, start + n)]


def started(store: ObjectStore, producer: str, **kwargs: object) -> Committer:
    committer = Committer(Manifest(store, **kwargs), producer)  # type: ignore[arg-type]
    committer.start()
    return committer


def offsets_in_log(store: ObjectStore) -> Counter:
    """How often each (producer, offset) is committed, over every step the log holds."""
    m = Manifest(store)
    return Counter((e.producer, e.offset) for e in m.entries(0, m.head().num_steps))


def commit(committer: Committer, n: int) -> int:
    """Commit the next ``n`` offsets of the committer's producer in one version; returns the version."""
    result = committer.attempt(entries(committer.producer_id, committer.next_offset, n))
    if not result.committed:
        raise AssertionError(f"commit failed: {result}")
    return result.version


class HookStore(CountingStore):
    """Runs ``action()`` once, right after the first call of ``op`` on a key that ``match`` accepts."""

    def __init__(self, inner: ObjectStore, op: str, match, action) -> None:
        super().__init__(inner)
        self.op, self.match, self.action, self.fired = op, match, action, False

    def _after(self, op: str, key: str) -> None:
        if not self.fired and op == self.op and self.match(key):
            self.fired = True
            self.action()

    def get(self, key: str) -> bytes:
        try:
            return super().get(key)
        finally:
            self._after("get", key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            return super().get_range(key, start, end)
        finally:
            self._after("get", key)

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        created = super().put_if_absent(key, data)
        self._after("put_if_absent", key)
        return created

    def exists(self, key: str) -> bool:
        found = super().exists(key)
        self._after("exists", key)
        return found


def reclaim_to(store: ObjectStore, version: int) -> None:
    """What the Reclaimer does: snapshot, boundary, then delete below."""
    m = Manifest(store)
    m.write_snapshot(version)
    m.advance_gc_boundary(version, m.read_version(version).first_step)
    m.delete_versions_below(version)


def legacy_log(store: ObjectStore, versions: int, per_version: int = 3, *, producer: str = "p0",
               start: int = 0) -> int:
    """Write versions ``start+1 ..`` of a format-1 log by hand (a namespace written before format 2).

    Version ``start + 1`` registers ``producer`` (epoch 1) when ``start`` is 0;
    each later one appends ``per_version`` entries. Returns the newest version.
    """
    import uuid

    from torch_tgb.manifest import ProducerState, Version

    from torch_tgb.manifest.keys import FLAT

    info = Manifest(store).dataset()  # the namespace's keys; without a dataset.json, the flat ones old versions wrote
    version_key = (FLAT if info is None else info.keys).version_key
    number, step, offset = start, 0, 0
    if start:
        head = Manifest(store).state_at(start)
        step = head.num_steps
        offset = head.producers[producer].next_offset if producer in head.producers else 0
    else:
        number += 1
        store.put_if_absent(version_key(number), Version(number, uuid.uuid4().hex, 0, (),
                                                         {producer: ProducerState(1, 0, 1.0)}).encode())
    for _ in range(versions):
        number += 1
        batch = entries(producer, offset, per_version)
        offset += per_version
        state = ProducerState(1, offset, 1.0, {"position": offset})
        version = Version(number, uuid.uuid4().hex, step, tuple(batch), {producer: state})
        step += per_version
        if not store.put_if_absent(version_key(number), version.encode()):
            raise AssertionError(f"slot {number} taken")
    return number
