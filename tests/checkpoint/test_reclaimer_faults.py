"""Reclaimer under real faults: a process SIGKILLed at random moments, and FaultyStore errors."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid

import pytest

from _lifecycle import Namespace, assert_resumable
from torch_tgb.checkpoint import Reclaimer, record_watermark, retire
from torch_tgb.errors import TGBError
from torch_tgb.manifest import Manifest
from torch_tgb.storage import FaultyStore, LocalStore, MemoryStore
from torch_tgb.storage.faulty import FaultPlan, FaultRates

LIVE = (40, 55)

CHILD = """
import sys, time
from torch_tgb.checkpoint import Reclaimer
from torch_tgb.storage import LatencyStore, LocalStore
store = LatencyStore(LocalStore(sys.argv[1], fsync=False), rtt=0.002, bandwidth=0)
print("ready", flush=True)
Reclaimer(store, clock=lambda: time.time() + 36000).run_once()
print("done", flush=True)
"""


def build(store) -> Namespace:
    ns = Namespace(store)
    for _ in range(60):
        ns.commit(1, size=16)
    for _ in range(3):
        ns.orphan(size=16)
    record_watermark(store, "old", {"tgb_cursor": {"step": 10}})
    for step in LIVE:
        record_watermark(store, f"ck-{step}", {"tgb_cursor": {"step": step}})
    retire(store, "old")
    return ns


def check_final(store, ns: Namespace) -> None:
    boundary = Manifest(store).gc_boundary()
    assert boundary.step == 40
    assert sorted(store.list("data/")) == sorted(ns.keys[40:])  # committed below 40 and orphans gone
    for step in LIVE:
        assert_resumable(store, step, ns.keys)


@pytest.mark.slow
def test_reclaimer_process_killed_at_random_points_then_rerun(tmp_path):
    store = LocalStore(tmp_path / "ns", fsync=False)
    ns = build(store)
    rng = random.Random(7)
    kills = 0
    for attempt in range(6):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "ns")], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.25))
        child.send_signal(signal.SIGKILL)
        if child.wait() == -signal.SIGKILL:
            kills += 1
        for step in LIVE:  # after a kill anywhere, live checkpoints still resume
            assert_resumable(store, step, ns.keys)
    assert kills >= 3
    Reclaimer(store, clock=lambda: time.time() + 36000).run_once()
    check_final(store, ns)


def test_reclaimer_with_faulty_store_eventually_completes():
    store = MemoryStore(f"faulty-{uuid.uuid4().hex}")
    ns = build(store)
    writes = FaultRates(error=0.2, timeout=0.1)  # a pass has few writes: make them fail often
    faulty = FaultyStore(store, FaultPlan(seed=3, default=FaultRates(error=0.01),
                                          ops={"put": writes, "delete": writes}))
    failures = 0
    for _ in range(200):
        try:
            Reclaimer(faulty, clock=lambda: time.time() + 36000).run_once()
            break
        except TGBError:
            failures += 1
            for step in LIVE:
                assert_resumable(store, step, ns.keys)
    else:
        raise AssertionError("no pass completed in 200 tries")
    assert failures >= 3 and faulty.count(kind="timeout") > 0
    check_final(store, ns)
    store.destroy()
