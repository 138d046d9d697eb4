"""Deterministic replays of races the chaos trials found between a reclaimer pass and a cold start.

A store wrapper runs a whole reclaimer pass at one exact point of another
client's reads, so the interleaving that SIGKILL chaos hits by chance is
replayed every time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.manifest.watermarks import record_watermark
from torch_tgb.consumer import ReaderOptions
from torch_tgb.manifest.keys import SNAPSHOT_HINT_KEY
from torch_tgb.storage import LocalStore, ObjectInfo, ObjectStore


class HookStore(ObjectStore):
    """Forwards to ``inner``; runs ``action`` once, right after the first call matching ``when``.

    ``when`` is a key (any read of it) or a predicate ``(op, key) -> bool``.
    """

    def __init__(self, inner: ObjectStore, when: str | Callable[[str, str], bool], action: Callable[[], object]) -> None:
        self.inner, self.action, self.url = inner, action, inner.url
        # metadata is read with get or a bounded get_range
        self.when = when if callable(when) else (lambda op, key, _k=when: op in ("get", "get_range") and key == _k)
        self.fired = False

    def _call(self, op: str, key: str, fn: Callable[[], object]):  # type: ignore[no-untyped-def]
        try:
            return fn()
        finally:
            if not self.fired and self.when(op, key):
                self.fired = True
                self.action()

    def get(self, key: str) -> bytes:
        return self._call("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._call("get_range", key, lambda: self.inner.get_range(key, start, end))

    def stat(self, key: str) -> ObjectInfo:
        return self._call("stat", key, lambda: self.inner.stat(key))

    def exists(self, key: str) -> bool:
        return self._call("exists", key, lambda: self.inner.exists(key))

    def list(self, prefix: str = "") -> list[str]:
        return self._call("list", prefix, lambda: self.inner.list(prefix))

    def put(self, key: str, data: bytes | memoryview) -> None:
        self._call("put", key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        return self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    def delete(self, keys: str | Iterable[str]) -> None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        self._call("delete", keys[0] if len(keys) == 1 else "", lambda: self.inner.delete(keys))


LAYOUT = tgb.Layout(dp=1)


@pytest.fixture
def namespace(tmp_path) -> str:
    """10 committed steps (one version each) and a live checkpoint at step 8."""
    ns = str(tmp_path / "ns")
    with tgb.Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="naive") as p:
        for offset in range(10):
            p.append({"x": torch.full((1, 2), float(offset))}, offset=offset)
            p.flush()
    record_watermark(ns, "ck", {"tgb_cursor": {"step": 8, "version": 0}})
    return ns


def _reclaim_after_hint_read(ns: str) -> HookStore:
    """A store on which a full reclaimer pass runs between reading the snapshot hint and probing."""
    return HookStore(LocalStore(ns), SNAPSHOT_HINT_KEY, lambda: tgb.Reclaimer(LocalStore(ns), grace_period=0).run_once())


def test_producer_start_survives_a_concurrent_reclaim(namespace: str) -> None:
    """bugs.md B4 (fixed): a cold start whose probes race a reclaimer pass."""
    store = _reclaim_after_hint_read(namespace)
    p = tgb.Producer(store, producer_id="p1", layout=LAYOUT, commit_policy="naive")
    assert store.fired
    assert p.resume_offset == 0
    p.close()


def test_consumer_start_survives_a_concurrent_reclaim(namespace: str) -> None:
    with tgb.Producer(namespace, producer_id="seal", layout=LAYOUT) as p:
        p.close(seal=True)
    store = _reclaim_after_hint_read(namespace)
    ds = tgb.TGBDataset(store, mesh=tgb.Mesh(0, 1), timeout=5, options=ReaderOptions())
    ds.load_state_dict({"tgb_cursor": {"step": 8, "version": 0}})
    got = [float(b["x"][0, 0]) for b in ds]
    assert store.fired
    assert got == [8.0, 9.0]


def test_reclaim_race_replay_without_reclaim_is_clean(namespace: str) -> None:
    """Control: the same wrapper with a no-op action starts a producer fine."""
    store = HookStore(LocalStore(namespace), SNAPSHOT_HINT_KEY, lambda: None)
    p = tgb.Producer(store, producer_id="p1", layout=LAYOUT, commit_policy="naive")
    assert p.resume_offset == 0
    p.close()


def test_commit_that_becomes_the_gc_boundary_is_kept(namespace: str) -> None:
    """bugs.md B9 (fixed): a reclaimer pass right after our create makes our new version the boundary.

    That version is legitimately committed (others may have read it) and the
    boundary version is kept by definition: the committer must not delete it.
    """
    from torch_tgb.manifest import Manifest
    from torch_tgb.manifest.watermarks import retire

    record_watermark(namespace, "all-read", {"tgb_cursor": {"step": 11, "version": 0}})
    retire(namespace, "ck")
    p = tgb.Producer(namespace, producer_id="p1", layout=LAYOUT, commit_policy="naive")
    target = Manifest(LocalStore(namespace)).latest_version() + 1
    version_key = Manifest(LocalStore(namespace)).version_key  # the namespace's key layout
    hook = HookStore(
        LocalStore(namespace),
        lambda op, key: op == "put_if_absent" and key == version_key(target),
        lambda: tgb.Reclaimer(LocalStore(namespace), grace_period=0).run_once(),
    )
    p.manifest.store = p._committer.store = hook  # only the committer's next create is hooked
    p.append({"x": torch.full((1, 2), 10.0)}, offset=0)
    p.flush()
    p.close()
    assert hook.fired
    fresh = Manifest(LocalStore(namespace))
    assert fresh.gc_boundary().version == target
    assert LocalStore(namespace).exists(version_key(target)), "the boundary version was deleted"
    # the checkpoint at step 11 has consumed step 10, so its object may go, but the kept
    # boundary version still records p1's offset 0 -- exactly once, at step 10
    assert fresh.head().num_steps == 11
    kept = fresh.read_version(target)
    assert kept.first_step == 10 and [(e.producer, e.offset) for e in kept.entries] == [("p1", 0)]


def test_checkpoint_rotation_between_listings_stays_protected(namespace: str) -> None:
    """A trainer rotates its checkpoint (record new, retire old) while a reclaimer lists (bugs.md B10, fixed)."""
    from torch_tgb.manifest.watermarks import WATERMARK_PREFIX, retire, safe_boundary

    record_watermark(namespace, "other-job", {"tgb_cursor": {"step": 9, "version": 0}})
    record_watermark(namespace, "mine-old", {"tgb_cursor": {"step": 2, "version": 0}})

    def rotate() -> None:
        record_watermark(namespace, "mine-new", {"tgb_cursor": {"step": 3, "version": 0}})
        retire(namespace, "mine-old")

    hook = HookStore(LocalStore(namespace), lambda op, key: op == "list" and key == WATERMARK_PREFIX, rotate)
    safe = safe_boundary(hook)
    assert hook.fired
    assert safe <= 3, f"safe boundary {safe}: neither the old (step 2) nor the new (step 3) checkpoint protected"


def test_grace_shorter_than_the_commit_delay_keeps_the_object(tmp_path) -> None:
    """An orphan grace below the write-to-commit delay no longer loses the object (B11, issue 13 R1).

    The object is written, a Reclaimer with grace 0 runs before the commit:
    the object belongs to the live incarnation at its next offset, so it is
    kept. If it disappears anyway (deleted behind the namespace's back), the
    reader fails loud naming the key, never skips it.
    """
    ns = str(tmp_path / "ns")
    p = tgb.Producer(ns, producer_id="p0", layout=LAYOUT, commit_policy="fixed:100")
    p.append({"x": torch.zeros(1, 2)}, offset=0)
    key = LocalStore(ns).list("data/")[0]
    report = tgb.Reclaimer(ns, grace_period=0).run_once()
    assert report.orphans == 0 and report.live_orphans == 1
    p.append({"x": torch.ones(1, 2)}, offset=1)
    LocalStore(ns).delete(key)  # an outside deletion: not the Reclaimer
    p.close(seal=True)
    ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(0, 1), timeout=5)
    with pytest.raises(tgb.TGBError) as info:
        list(ds)
    assert key in str(info.value)
