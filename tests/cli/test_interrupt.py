"""Ctrl-C during `tgb produce`: what was appended is committed, the producer is closed (not left open), exit 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli.conftest import ROOT, tgb_cli


def _interrupt_after_first_commit(args: list[str], ns: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TGB_PROGRESS": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "torch_tgb.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(list((ns / "_tgb" / "log").rglob("*.json"))) < 2:  # version 1 registers the producer: wait for TGBs
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _inspect(ns: Path) -> dict:
    proc = tgb_cli("inspect", str(ns), "--json", "--no-sizes")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("source", [False, True])
def test_ctrl_c_commits_closes_the_producer_and_exits_130(tmp_path, source):
    ns = tmp_path / "ns"
    if source:
        np.save(tmp_path / "corpus.npy", (np.arange(40_000) % 1000).astype(np.uint16))
        args = ["produce", str(ns), "--source", f"token-file:{tmp_path / 'corpus.npy'}", "--shard", "0/1",
                "--global-batch", "2", "--seq-len", "16", "--rate", "10", "--json"]
    else:
        args = ["produce", str(ns), "--steps", "10000", "--global-batch", "2", "--seq-len", "8", "--rate", "10",
                "--json"]
    proc = _interrupt_after_first_commit(args, ns)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert "tgb: interrupted: finishing the TGB in hand" in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["interrupted"] is True and summary["done"] is False and 0 < summary["next_offset"]
    report = _inspect(ns)
    (producer,) = report["producers"]
    # everything appended is committed and the producer is marked closed, not "still being written"
    assert producer["status"] == "closed" and producer["next_offset"] == summary["next_offset"]
    assert report["steps"] == summary["next_offset"] and not report["sealed"]
    if source:
        assert report["job"]["shards"][0]["status"] == "stopped"
    rerun = tgb_cli(*[a for a in args if a not in ("--rate", "10")], timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert json.loads(rerun.stdout)["resumed_at"] == summary["next_offset"]


def test_produce_stops_on_its_event_after_the_batch_in_hand(tmp_path):
    import threading

    import torch_tgb as tgb
    from torch_tgb import sources
    from torch_tgb.datapipes import document_batches

    np.save(tmp_path / "c.npy", (np.arange(4_000) % 500).astype(np.uint16))
    stop = threading.Event()

    def pipeline():
        return document_batches(sources.TokenFile(str(tmp_path / "c.npy")), seq_len=16, global_batch_size=2)

    ns = str(tmp_path / "ns")
    report = tgb.produce(ns, pipeline(), shard=(0, 1), progress=False, stop=stop,
                         on_append=lambda offset: offset == 2 and stop.set())
    assert report.interrupted and not report.done and report.end_offset == 3 and report.skipped == {}
    head = tgb.manifest.Manifest(tgb.storage.open_store(ns)).head()
    assert head.num_steps == 3 and head.producers[report.producer_id].status == "closed" and not head.sealed
    rest = tgb.produce(ns, pipeline(), shard=(0, 1), progress=False)
    assert rest.start_offset == 3 and rest.sealed and not rest.interrupted
