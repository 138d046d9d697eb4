"""The GC boundary never moves back, even when a stale boundary write lands late (issue 13 audit).

The boundary is the highest of its immutable generations
(``_tgb/gc_boundary/<version>-<step>.json``, created with ``put_if_absent``).
``LateStore`` records every boundary write and can land any earlier one again
at any time, the way a delayed retry of a timed-out PUT lands on S3 after
newer writes, even unconditionally. No process, fresh or long-lived, may see
the boundary go back.
"""

from __future__ import annotations

import uuid

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_tgb as tgb
from torch_tgb.checkpoint import record_watermark
from torch_tgb.errors import ManifestError
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import GC_BOUNDARY_KEY, GC_BOUNDARY_PREFIX, boundary_key
from torch_tgb.manifest.records import GCBoundary
from torch_tgb.storage import ForwardingStore, LocalStore, MemoryStore, ObjectStore
from torch_tgb.storage._base import Buffer


def _is_boundary(key: str) -> bool:
    return key == GC_BOUNDARY_KEY or key.startswith(GC_BOUNDARY_PREFIX)


class LateStore(ForwardingStore):
    """Records boundary writes; ``echo=True`` lands the previous one again right after each new one."""

    def __init__(self, inner: ObjectStore, *, echo: bool = False) -> None:
        super().__init__(inner)
        self.boundary_writes: list[tuple[str, bytes]] = []
        self.echo = echo

    def put(self, key: str, data: Buffer) -> None:
        self.inner.put(key, data)
        self._record(key, data)

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        created = self.inner.put_if_absent(key, data)
        self._record(key, data)
        return created

    def _record(self, key: str, data: Buffer) -> None:
        if not _is_boundary(key):
            return
        if self.echo and self.boundary_writes and self.boundary_writes[-1][0] != key:
            self.land_late(len(self.boundary_writes) - 1)  # a duplicate of the older write lands now
        self.boundary_writes.append((key, bytes(data)))

    def land_late(self, index: int) -> None:
        """The ``index``-th boundary write lands again, as an unconditional PUT (the worst a retry can do)."""
        key, data = self.boundary_writes[index]
        self.inner.put(key, data)


def namespace(store: ObjectStore, steps: int = 12) -> None:
    with tgb.Producer(store, producer_id="p0", layout=tgb.Layout(dp=1), commit_policy="naive") as p:
        for offset in range(steps):
            p.append({"x": torch.full((1, 2), float(offset))}, offset=offset)
            p.flush()


def test_a_duplicate_of_an_older_write_landing_right_after_changes_nothing(tmp_path) -> None:
    store = LateStore(LocalStore(tmp_path / "ns", fsync=False), echo=True)
    namespace(store)
    m = Manifest(store)
    for version, step in ((4, 3), (8, 7)):
        m.write_snapshot(version)
        m.advance_gc_boundary(version, step)
    assert Manifest(store.inner).gc_boundary() == GCBoundary(8, 7)  # what every fresh reader sees


def test_a_late_landing_never_moves_the_boundary_back_even_for_a_fresh_process(tmp_path) -> None:
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
    fresh = Manifest(store.inner)  # a process that never saw the newer boundary (failed before: step 4)
    assert fresh.gc_boundary().step == 9
    with pytest.raises(ManifestError, match="only forward"):
        fresh.advance_gc_boundary(first.boundary_version, 4)
    assert [e.offset for e in fresh.entries(9, 12)] == [9, 10, 11]
    rec.run_once()  # the next advance drops the re-created lower generation
    assert store.inner.list(GC_BOUNDARY_PREFIX) == [boundary_key(second.boundary_version, 9)]


@settings(max_examples=40, deadline=None)
@given(plan=st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=12),
       late=st.lists(st.integers(0, 1000), max_size=12))
def test_any_late_landings_leave_the_highest_generation(plan, late) -> None:
    """Advances of random sizes, old writes landing late in between: a fresh reader always sees the newest."""
    store = LateStore(MemoryStore(f"gc-late-{uuid.uuid4().hex}"))
    namespace(store, steps=40)
    writer = Manifest(store)
    version = step = 0
    for (grow, step_too), pick in zip(plan, late + [None] * len(plan)):
        version += grow
        step = min(step + (grow if step_too else 0), writer.read_version(version).stop_step) if version else 0
        if version:
            writer.write_snapshot(version)
            writer.advance_gc_boundary(version, step)
        if pick is not None and store.boundary_writes:
            store.land_late(pick % len(store.boundary_writes))
        expected = GCBoundary(version, step) if version else GCBoundary()
        assert Manifest(store.inner).gc_boundary() == expected


def test_a_namespace_reclaimed_before_generations_keeps_its_boundary(tmp_path) -> None:
    """``_tgb/gc_boundary.json`` (the format before generations) is read until the first generation exists."""
    store = LocalStore(tmp_path / "ns", fsync=False)
    namespace(store)
    store.delete(store.list(GC_BOUNDARY_PREFIX))  # what a namespace made before generations holds
    m = Manifest(store)
    m.write_snapshot(4)
    store.put(GC_BOUNDARY_KEY, b'{"format": "tgb-manifest/1", "version": 4, "step": 3}')
    assert Manifest(store).gc_boundary() == GCBoundary(4, 3)
    with pytest.raises(ManifestError, match="only forward"):
        Manifest(store).advance_gc_boundary(2, 1)
    m.write_snapshot(8)
    Manifest(store).advance_gc_boundary(8, 7)
    assert not store.exists(GC_BOUNDARY_KEY)
    assert store.list(GC_BOUNDARY_PREFIX) == [boundary_key(8, 7)]


def test_foreign_names_under_the_prefix_are_not_generations(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    namespace(store)
    Manifest(store).write_snapshot(4)
    Manifest(store).advance_gc_boundary(4, 3)
    store.put(f"{GC_BOUNDARY_PREFIX}99999999999999999999-1.json", b"{}")
    store.put(f"{GC_BOUNDARY_PREFIX}notes.txt", b"x")
    assert Manifest(store).gc_boundary() == GCBoundary(4, 3)


def test_a_deleted_generation_is_written_again_before_anything_is_deleted(tmp_path) -> None:
    store = LocalStore(tmp_path / "ns", fsync=False)
    namespace(store)
    rec = tgb.Reclaimer(store, grace_period=0)
    record_watermark(store, "a", {"tgb_cursor": {"step": 6, "version": 0}})
    first = rec.run_once()
    store.delete(store.list(GC_BOUNDARY_PREFIX))  # by hand
    assert Manifest(store).stored_gc_boundary() == GCBoundary()
    assert rec.manifest.repair_gc_boundary().step == first.boundary_step
    assert store.list(GC_BOUNDARY_PREFIX) == [boundary_key(first.boundary_version, first.boundary_step)]
