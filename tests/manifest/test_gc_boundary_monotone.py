"""The GC boundary never moves back, even when a stale boundary write lands late (issue 13 audit).

``LateStore`` records every write of ``_tgb/gc_boundary.json`` and can land
an earlier one again, the way a delayed retry of a timed-out PUT lands on S3
after a newer write.
"""

from __future__ import annotations

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.checkpoint import record_watermark
from torch_tgb.errors import ManifestError
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import GC_BOUNDARY_KEY
from torch_tgb.manifest.records import GCBoundary
from torch_tgb.storage import ForwardingStore, LocalStore, ObjectStore
from torch_tgb.storage._base import Buffer


class LateStore(ForwardingStore):
    """Records boundary writes; ``echo=True`` lands the previous one again right after each new one."""

    def __init__(self, inner: ObjectStore, *, echo: bool = False) -> None:
        super().__init__(inner)
        self.boundary_writes: list[bytes] = []
        self.echo = echo

    def put(self, key: str, data: Buffer) -> None:
        self.inner.put(key, data)
        if key == GC_BOUNDARY_KEY:
            if self.echo and self.boundary_writes and self.boundary_writes[-1] != bytes(data):
                self.inner.put(key, self.boundary_writes[-1])  # a duplicate of the older write lands now
            self.boundary_writes.append(bytes(data))

    def land_late(self, index: int) -> None:
        self.inner.put(GC_BOUNDARY_KEY, self.boundary_writes[index])


def namespace(store: ObjectStore, steps: int = 12) -> None:
    with tgb.Producer(store, producer_id="p0", layout=tgb.Layout(dp=1), commit_policy="naive") as p:
        for offset in range(steps):
            p.append({"x": torch.full((1, 2), float(offset))}, offset=offset)
            p.flush()


def test_a_duplicate_of_an_older_write_landing_right_after_is_repaired(tmp_path) -> None:
    store = LateStore(LocalStore(tmp_path / "ns", fsync=False), echo=True)
    namespace(store)
    m = Manifest(store)
    for version, step in ((4, 3), (8, 7)):
        m.write_snapshot(version)
        m.advance_gc_boundary(version, step)
    assert Manifest(store.inner).gc_boundary() == GCBoundary(8, 7)  # what every fresh reader sees


def test_a_late_landing_never_moves_the_boundary_back(tmp_path) -> None:
    store = LateStore(LocalStore(tmp_path / "ns", fsync=False))
    namespace(store)
    rec = tgb.Reclaimer(store, grace_period=0)
    record_watermark(store, "a", {"tgb_cursor": {"step": 4, "version": 0}})
    first = rec.run_once()
    record_watermark(store, "b", {"tgb_cursor": {"step": 9, "version": 0}})
    tgb.checkpoint.retire(store, "a")
    second = rec.run_once()
    assert (first.boundary_step, second.boundary_step) == (4, 9)
    store.land_late(0)  # the first pass's write lands again, after the second pass deleted below step 9
    assert Manifest(store.inner).stored_gc_boundary().step == 4  # stale on storage for now ...
    m = rec.manifest
    assert m.gc_boundary().step == 9  # ... but never for a Manifest that read the newer one
    with pytest.raises(ManifestError, match="only forward"):
        m.advance_gc_boundary(first.boundary_version, 4)
    rec.run_once()  # the next pass writes it back before deleting anything
    assert Manifest(store.inner).gc_boundary().step == 9
    entries = Manifest(store.inner).entries(9, 12)
    assert [e.offset for e in entries] == [9, 10, 11]
