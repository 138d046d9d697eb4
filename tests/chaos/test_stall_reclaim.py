"""A producer SIGSTOPped between its existence check and its conditional create, past the orphan grace period.

Issue 13 item 1: while it is stopped, a Reclaimer with a short grace period
and one whose clock runs 4000 s ahead (production grace period) each run a
pass; the producer is then resumed and commits. Its object must still exist:
an uncommitted object of a live incarnation at or above its ``next_offset``
is never deleted, whatever the clocks say. Local, S3 (moto), GCS and Azure (emulators).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from _driver import Zygote

import torch_tgb as tgb
from torch_tgb.format import read_footer
from torch_tgb.manifest import Manifest
from torch_tgb.storage import LocalStore, ObjectStore, open_store

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc to see that the producer stopped"),
]

GRACE = 0.5
SKEW = 4000.0


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _stall_and_reclaim(zygote: Zygote, tmp: str, root: str, options: dict[str, Any] | None) -> None:
    marker = os.path.join(tmp, "stopped")
    pid = zygote.spawn("stalling_producer", {"root": root, "marker": marker, "n": 3, "options": options},
                       os.path.join(tmp, "producer.log"))
    deadline = time.monotonic() + 60
    while not os.path.exists(marker):
        assert zygote.poll(pid) is None, open(os.path.join(tmp, "producer.log")).read()
        assert time.monotonic() < deadline, "the producer never reached its create"
        time.sleep(0.05)
    while _state(pid) != "T":  # the stop has taken effect
        assert time.monotonic() < deadline, f"the producer did not stop (state {_state(pid)})"
        time.sleep(0.01)
    store: ObjectStore = LocalStore(root, fsync=False) if options is None else open_store(root, options)
    reaped = False
    try:
        time.sleep(2 * GRACE)  # stopped past the grace period
        short = tgb.Reclaimer(store, grace_period=GRACE).run_once()
        skewed = tgb.Reclaimer(store, clock=lambda: time.time() + SKEW).run_once()
        assert short.orphans == skewed.orphans == 0, (short, skewed)
        os.kill(pid, signal.SIGCONT)
        code = zygote.wait(pid, 60)
        reaped = True
        assert code == 0, open(os.path.join(tmp, "producer.log")).read()
        manifest = Manifest(store)
        entries = list(manifest.entries(0, manifest.head().num_steps))
        assert [e.offset for e in entries] == [0, 1, 2]
        for e in entries:  # every committed object is there and parses
            read_footer(store, e.key, size=e.size, footer_offset=e.footer_offset, footer_length=e.footer_length)
    finally:
        if not reaped:
            os.kill(pid, signal.SIGCONT)
            zygote.kill(pid)


def test_sigstop_past_grace_local(zygote: Zygote, tmp_path) -> None:
    root = str(tmp_path / "ns")
    os.makedirs(root)
    _stall_and_reclaim(zygote, str(tmp_path), root, None)


def test_sigstop_past_grace_cloud(zygote: Zygote, cloud_namespace, tmp_path) -> None:
    url, options = cloud_namespace
    _stall_and_reclaim(zygote, str(tmp_path), url, options)
