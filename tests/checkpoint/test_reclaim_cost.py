"""A Reclaimer pass costs its work: requests per reclaimed object, and an idle pass, whatever the live history.

Counts from a counting store (no timing). One-TGB objects, one entry per
version: the shape whose passes used to re-read every live version.
"""

from __future__ import annotations

import uuid

import pytest
from _lifecycle import Namespace

from torch_tgb.checkpoint import Reclaimer, record_watermark
from torch_tgb.storage import MemoryStore
from torch_tgb.testing.counting import CountingStore

LIVE = 1200  # versions of one entry each


@pytest.fixture
def namespace():
    store = MemoryStore(f"rcost-{uuid.uuid4().hex}")
    ns = Namespace(store)
    for _ in range(LIVE):
        ns.commit(1)
    yield store, ns
    store.destroy()


def _pass(store, step: int | None) -> tuple[dict, object]:
    if step is not None:
        record_watermark(store, "ck", {"tgb_cursor": {"step": step, "version": 1}})
    counting = CountingStore(store)
    report = Reclaimer(counting, sweep_interval=3600.0).run_once()
    return counting.report(), report


def test_an_idle_pass_reads_almost_nothing_and_a_pass_costs_its_work(namespace) -> None:
    store, ns = namespace
    _, first = _pass(store, 100)  # the first pass sweeps (nothing known yet) and records what it did
    assert first.objects == 100
    counts, report = _pass(store, None)  # idle: same watermark, sweep not due
    assert report.objects == 0 and counts["requests"] <= 10, counts
    counts, report = _pass(store, 400)  # 300 objects and versions to reclaim, 800 live versions above them
    assert report.objects == 300 and report.versions == 300
    assert counts["requests"] <= 2 * report.objects, counts
    assert counts["by_class"]["log"]["requests"] <= report.versions + 20  # never the 800 live versions
    assert all(not store.exists(k) for k in ns.keys[:400]) and all(store.exists(k) for k in ns.keys[400:])


def test_a_segment_straddling_the_boundary_is_kept_until_its_last_tgb_is_behind(tmp_path) -> None:
    """Segments: a pass decides from the next entries of the producer, not from the whole live log."""
    import torch

    import torch_tgb as tgb
    from torch_tgb.manifest import Manifest
    from torch_tgb.producer import ProducerConfig

    ns = str(tmp_path / "ns")
    layout = tgb.Layout(dp=1)
    config = ProducerConfig(segment_tgbs=4)
    with tgb.Producer(ns, producer_id="p", layout=layout, commit_policy="naive", config=config) as p:
        for offset in range(12):  # segments of offsets 0-3, 4-7, 8-11; naive: one entry per version
            p.append({"x": torch.full((2, 2), offset)}, offset=offset)
        p.close(seal=True)
    keys = [e.key for e in Manifest(tgb.storage.open_store(ns)).entries(0, 12)]
    assert len(set(keys)) == 3
    record_watermark(ns, "ck", {"tgb_cursor": {"step": 6, "version": 1}})
    Reclaimer(ns, grace_period=0).run_once()
    store = tgb.storage.open_store(ns)
    assert not store.exists(keys[0]) and store.exists(keys[4]) and store.exists(keys[8])
    record_watermark(ns, "ck", {"tgb_cursor": {"step": 8, "version": 1}})
    Reclaimer(ns, grace_period=0).run_once()
    assert not store.exists(keys[4]) and store.exists(keys[8])


def test_a_sweep_recorded_by_a_clock_that_ran_ahead_does_not_hold_back_the_next_one(tmp_path) -> None:
    """A reclaimer whose clock ran 4000 s ahead records its sweep in the future; a later pass on a true clock
    must still sweep (the chaos run's final grace-0 pass left an orphan behind before)."""
    import time

    import torch

    from torch_tgb.layout import Layout
    from torch_tgb.producer import Producer

    store = MemoryStore(f"skew-{uuid.uuid4().hex}")
    try:
        with Producer(store, producer_id="p", layout=Layout(dp=2), commit_policy="fixed:1") as p:
            p.append({"x": torch.zeros(2, 3, dtype=torch.int32)})
            p.close(seal=True)
        Reclaimer(store, grace_period=0, clock=lambda: time.time() + 4000).run_once()  # sweeps, "in the future"
        orphan = "data/p/e000001-o000000000007-0badcafe.tgb"  # never committed: dead in a sealed namespace
        store.put(orphan, b"x" * 64)
        report = Reclaimer(store, grace_period=0).run_once()
        assert orphan not in store.list("data/") and report.orphans == 1
    finally:
        store.destroy()
