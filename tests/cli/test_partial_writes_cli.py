"""A `tgb produce` SIGKILLed mid-segment leaks nothing (issue 40, "Storage that leaks").

As a user did it: kill a producer while its 64 MiB segment is being written,
look with `tgb inspect` / `tgb verify` (they count the partial write and say
how to reclaim it), then either rerun the producer to completion (it removes
what its killed incarnation left) or, for a producer that never comes back,
`tgb reclaim --fence`. Before, the killed segment's `.tgb-tmp.*` file
survived the rerun, the seal and `tgb reclaim --grace-period 0`, and neither
inspect nor verify saw it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import torch_tgb.cli.main as cli_main
from tests.cli.conftest import ROOT

pytestmark = pytest.mark.timeout(300)

TMP = ".tgb-tmp."


def temp_files(ns: Path) -> list[Path]:
    return sorted(p for p in ns.rglob(f"{TMP}*") if p.is_file())


def kill_mid_segment(ns: Path, *args: str) -> int:
    """Start `tgb produce NS *args` with 64 MiB segments, SIGKILL it once its first segment holds bytes."""
    exe = shutil.which("tgb")
    cmd = [exe] if exe else [sys.executable, "-m", "torch_tgb.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*cmd, "produce", str(ns), *args, "--global-batch", "4", "--seq-len", "64", "--segment-mb", "64"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not [p for p in temp_files(ns / "data") if p.stat().st_size > 0]:
            assert proc.poll() is None, "the producer ended before its first segment was written"
            assert time.monotonic() < deadline, "no segment temp file appeared"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # a 64 MiB segment takes thousands of these batches: killed inside the first, after its metadata puts
    [leftover] = temp_files(ns)
    return leftover.stat().st_size


def tgb(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run a `tgb` command in this process: (exit code, stdout)."""
    capsys.readouterr()
    code = cli_main.main(list(argv))
    return code, capsys.readouterr().out


def tgb_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out = tgb(capsys, *argv, "--json")
    assert code == 0, out
    return json.loads(out)


def test_a_rerun_of_a_shard_killed_mid_segment_leaves_no_partial_write(tmp_path: Path, capsys) -> None:
    """The issue's run: SIGKILL mid-shard, rerun to completion (it seals), reclaim with no grace."""
    corpus = tmp_path / "corpus.npy"
    np.save(corpus, np.arange(600_000, dtype=np.uint16) % 50_000)  # ~2,300 batches: one segment, never full
    ns = tmp_path / "ns"
    shard = ["--source", f"token-file:{corpus}", "--shard", "0/1", "--producer-id", "job"]
    size = kill_mid_segment(ns, *shard, "--rate", "100")  # slowed down: the kill lands inside the segment
    pid = "job-shard00000-of00001"
    partial = tgb_json(capsys, "inspect", str(ns))["storage"]["partial_writes"]
    assert (partial["count"], partial["live"], partial["live_producers"]) == (1, 1, [pid])
    assert partial["bytes"] >= size > 0
    text = tgb(capsys, "inspect", str(ns))[1]
    assert "partial writes" in text and "a rerun of the producer removes them" in text
    assert tgb_json(capsys, "verify", str(ns))["partial_writes"]["count"] == 1
    assert "partial writes: 1 (" in tgb(capsys, "verify", str(ns))[1]
    # the killed incarnation may be a zombie still writing: the Reclaimer keeps what a live producer owns
    kept = tgb_json(capsys, "reclaim", str(ns), "--grace-period", "0")
    assert (kept["partials"], kept["live_partials"]) == (0, 1) and len(temp_files(ns)) == 1

    code, _ = tgb(capsys, "produce", str(ns), *shard, "--global-batch", "4", "--seq-len", "64", "--segment-mb", "64")
    assert code == 0 and temp_files(ns) == []  # the rerun removed what its killed incarnation left
    report = tgb_json(capsys, "reclaim", str(ns), "--grace-period", "0")
    assert (report["partials"], report["live_partials"]) == (0, 0)
    after = tgb_json(capsys, "inspect", str(ns))
    assert after["sealed"] and after["steps"] > 2000 and after["storage"]["partial_writes"]["count"] == 0
    assert tgb(capsys, "verify", str(ns))[0] == 0


def test_the_reclaimer_removes_a_vanished_producers_partial_write(tmp_path: Path, capsys) -> None:
    ns = tmp_path / "ns"
    assert kill_mid_segment(ns, "--producer-id", "gone", "--steps", "1000000") > 0
    code, out = tgb(capsys, "reclaim", str(ns), "--fence", "gone", "--grace-period", "0")
    assert code == 0 and "1 partial write," in out and temp_files(ns) == []
    assert tgb_json(capsys, "inspect", str(ns))["storage"]["partial_writes"]["count"] == 0
