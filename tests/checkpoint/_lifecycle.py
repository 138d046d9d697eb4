"""Test helpers: a namespace filled through the real commit protocol, and its invariants.

Objects are opaque bytes (the Reclaimer never opens a TGB), so these helpers
need only the manifest: tests stay fast and independent of the format module.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from torch_tgb.errors import StorageError
from torch_tgb.manifest import Committer, Manifest, TGBEntry
from torch_tgb.storage import ForwardingStore, ObjectStore


@dataclass
class Namespace:
    """A store plus one committing producer; tracks every step's object key."""

    store: ObjectStore
    producer: str = "p0"
    keys: list[str] = field(default_factory=list)  # step -> object key
    orphans: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """A new producer incarnation: its start() registers (no version; its first commit puts its epoch in the log)."""
        self.committer = Committer(Manifest(self.store), self.producer)
        self.committer.start()

    def commit(self, n: int, *, size: int = 64) -> None:
        """Write ``n`` objects and commit them as one version."""
        offset = self.committer.next_offset
        entries = []
        for i in range(n):
            key = f"data/{self.producer}/o{offset + i:08d}-{uuid.uuid4().hex[:8]}.tgb"
            self.store.put(key, bytes(size))
            entries.append(TGBEntry(key, size, 0, 8, self.producer, offset + i))
        for _ in range(10):
            result = self.committer.attempt(entries)
            if result.committed:
                self.keys.extend(e.key for e in entries)
                return
        raise AssertionError("commit did not land in 10 attempts without competitors")

    def orphan(self, *, size: int = 64) -> str:
        key = f"data/{self.producer}/orphan-{uuid.uuid4().hex[:8]}.tgb"
        self.store.put(key, bytes(size))
        self.orphans.append(key)
        return key

    @property
    def num_steps(self) -> int:
        return len(self.keys)


def assert_resumable(store: ObjectStore, step: int, keys: list[str]) -> None:
    """A fresh reader finds steps ``step..`` in the log, with their objects present."""
    manifest = Manifest(store)
    head = manifest.head()
    assert head.num_steps == len(keys)
    entries = manifest.entries(step, head.num_steps)
    assert [e.key for e in entries] == keys[step:], f"log from {step=} differs"
    missing = [e.key for e in entries if not store.exists(e.key)]
    assert not missing, f"objects needed from {step=} are gone: {missing[:3]}"


class KillAfter(ForwardingStore):
    """Wraps a store; the ``budget``-th mutating call and every later one raise (a process dying there)."""

    def __init__(self, inner: ObjectStore, budget: int) -> None:
        super().__init__(inner)
        self.budget = budget

    def _spend(self, what: str) -> None:
        if self.budget <= 0:
            raise StorageError(f"killed before {what}")
        self.budget -= 1

    def put(self, key, data):
        self._spend(f"put {key}")
        self.inner.put(key, data)

    def put_if_absent(self, key, data):
        self._spend(f"put_if_absent {key}")
        return self.inner.put_if_absent(key, data)

    def delete(self, keys):
        keys = [keys] if isinstance(keys, str) else list(keys)
        for key in keys:  # one at a time, so a kill can land between any two deletes
            self._spend(f"delete {key}")
            self.inner.delete(key)
