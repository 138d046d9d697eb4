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
from torch_tgb.checkpoint.watermarks import record_watermark
from torch_tgb.consumer.dataset import ReaderOptions
from torch_tgb.manifest.manifest import SNAPSHOT_HINT_KEY
from torch_tgb.storage import LocalStore, ObjectInfo, ObjectStore


class HookStore(ObjectStore):
    """Forwards to ``inner``; runs ``action`` once, right after the first read of ``key``."""

    def __init__(self, inner: ObjectStore, key: str, action: Callable[[], object]) -> None:
        self.inner, self.key, self.action, self.url = inner, key, action, inner.url
        self.fired = False

    def get(self, key: str) -> bytes:
        try:
            return self.inner.get(key)
        finally:
            if key == self.key and not self.fired:
                self.fired = True
                self.action()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.inner.get_range(key, start, end)

    def stat(self, key: str) -> ObjectInfo:
        return self.inner.stat(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> list[str]:
        return self.inner.list(prefix)

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        return self.inner.put_if_absent(key, data)

    def delete(self, keys: str | Iterable[str]) -> None:
        self.inner.delete(keys)


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


@pytest.mark.xfail(strict=True, reason="bugs.md B4: Manifest.latest_version probes from a stale GC boundary/hint; "
                   "a cold start racing a reclaimer pass fails with 'state at version=0 is reclaimed'")
def test_producer_start_survives_a_concurrent_reclaim(namespace: str) -> None:
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
