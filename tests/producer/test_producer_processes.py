"""Producers as separate processes: many at once, killed at every point, zombies.

Children are forked the test process (torch is already imported, so a
child starts in milliseconds); the S3 run spawns fresh interpreters, which
is slower, so it is smaller (4 producers x 25 TGBs instead of 8 x 200).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import signal
import time
from collections import Counter

import pytest
from _producer_worker import CRASH_EXIT, FENCED_EXIT, run_producer, run_reader

from torch_tgb.manifest import Manifest
from torch_tgb.storage import open_store

pytestmark = pytest.mark.slow

FORK = multiprocessing.get_context("fork")
SPAWN = multiprocessing.get_context("spawn")


def check_exactly_once(ns: str, options, expected: dict[str, int]) -> list[str]:
    m = Manifest(open_store(ns, options))
    head = m.head()
    entries = m.entries(0, head.num_steps)
    seen = Counter((e.producer, e.offset) for e in entries)
    assert seen == Counter({(pid, o): 1 for pid, n in expected.items() for o in range(n)})
    for pid in expected:  # each producer's offsets appear in order
        assert [e.offset for e in entries if e.producer == pid] == list(range(expected[pid]))
    return [e.key for e in entries]


def run_many(
    ctx, ns: str, options, producers: int, per: int, readers: int, poll_s: float = 0.05, policy: str = "dac"
) -> None:
    queue = ctx.Queue()
    total = producers * per
    reader_procs = [
        ctx.Process(target=run_reader, args=(ns, options, total, queue), kwargs={"poll_s": poll_s})
        for _ in range(readers)
    ]
    producer_procs = [
        ctx.Process(target=run_producer, args=(ns, options, f"p{i}", per), kwargs={"policy": policy})
        for i in range(producers)
    ]
    for proc in producer_procs + reader_procs:
        proc.start()
    for proc in producer_procs:
        proc.join(300)
        assert proc.exitcode == 0
    results = [queue.get(timeout=300) for _ in reader_procs]
    for proc in reader_procs:
        proc.join(60)
    keys = check_exactly_once(ns, options, {f"p{i}": per for i in range(producers)})
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    assert results == [(total, digest, True)] * readers  # every reader derived the same sequence


def test_eight_processes_local_directory(tmp_path) -> None:
    run_many(FORK, str(tmp_path / "ns"), None, producers=8, per=200, readers=4)


def test_four_processes_cloud(cloud_namespace) -> None:
    url, options = cloud_namespace
    # Fixed(5) rather than DAC: on moto DAC's gaps (seconds for 4 producers) dominate so short a run;
    # a conflict-heavy policy also exercises rebase over S3 harder.
    run_many(FORK, url, options, producers=4, per=25, readers=4, poll_s=0.2, policy="fixed:5")


def test_kill_at_random_points_exactly_once(tmp_path) -> None:
    """20 crashes of the same producer_id: exact crash points by hook, and SIGKILL at random times."""
    ns, stop = str(tmp_path / "ns"), 400
    rng = random.Random(1234)
    points = ("after_object_write", "before_commit", "after_version_put", "after_commit", "sigkill")
    outcomes = Counter()
    for i in range(20):
        point = points[i % len(points)]
        if point == "sigkill":
            proc = FORK.Process(target=run_producer, args=(ns, None, "k", stop),
                                kwargs={"policy": "fixed:2", "delay_s": 0.01})
            proc.start()
            time.sleep(rng.uniform(0.02, 0.3))
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
        else:
            proc = FORK.Process(target=run_producer, args=(ns, None, "k", stop),
                                kwargs={"policy": "fixed:2", "crash_point": point, "crash_after": rng.randint(1, 6)})
            proc.start()
        proc.join(60)
        outcomes[proc.exitcode] += 1
    assert outcomes[CRASH_EXIT] + outcomes[-signal.SIGKILL] >= 15, outcomes
    done = Manifest(open_store(ns)).head().producers["k"].next_offset
    assert done < stop  # the crashes left work for the final run
    final = FORK.Process(target=run_producer, args=(ns, None, "k", stop))
    final.start()
    final.join(60)
    assert final.exitcode == 0
    check_exactly_once(ns, None, {"k": stop})
    head = Manifest(open_store(ns)).head()
    assert 1 < head.producers["k"].epoch <= 21  # one bump per incarnation that got that far
    orphans = set(open_store(ns).list("data/k/")) - set(check_exactly_once(ns, None, {"k": stop}))
    assert orphans  # objects written but never committed stay invisible


def test_zombie_process_is_fenced(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    first = FORK.Process(target=run_producer, args=(ns, None, "z", 10_000),
                         kwargs={"policy": "naive", "delay_s": 0.01})
    first.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until the first incarnation has committed something
        try:
            head = Manifest(open_store(ns)).head()
        except Exception:  # noqa: BLE001 - the namespace may not exist yet
            head = None
        if head is not None and head.producers.get("z") and head.producers["z"].next_offset >= 5:
            break
        time.sleep(0.05)
    second = FORK.Process(target=run_producer, args=(ns, None, "z", 0))  # starts (epoch bump), appends nothing
    second.start()
    second.join(60)
    assert second.exitcode == 0
    first.join(60)
    assert first.exitcode == FENCED_EXIT
    m = Manifest(open_store(ns))
    bump = None
    for number in range(1, m.latest_version() + 1):
        version = m.read_version(number)
        state = version.producers.get("z")
        if state is not None and state.epoch == 2:
            bump = number
            break
    assert bump is not None
    later = [e for n in range(bump, m.latest_version() + 1) for e in m.read_version(n).entries]
    assert later == []  # nothing from the first incarnation after the bump
    check_exactly_once(ns, None, {"z": m.head().producers["z"].next_offset})
