"""`tgb demo` end to end at a tiny size, as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_runs_end_to_end_and_everything_is_exactly_once(tmp_path):
    proc = subprocess.run(
        [
            sys.executable, "-m", "torch_tgb.cli", "demo", str(tmp_path / "demo"),
            "--steps", "8", "--global-batch", "4", "--seq-len", "16", "--compute-ms", "0", "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["exactly_once"] is True and summary["ranks_aligned"] is True and summary["verify_ok"] is True
    assert summary["steps_read_per_rank"] == [8, 8]
    assert summary["steps_committed"] == 8
    assert summary["restart_at_step"] == 4 and summary["end_step"] == 8
    assert summary["commit_successes"] >= 2  # two producers, at least one commit each
    assert summary["commit_attempts"] == summary["commit_successes"] + summary["commit_conflicts"]
    assert summary["consumer_tokens"] == 8 * 4 * 16  # each rank half of every batch: every token once
    assert summary["bytes_reclaimed"] > 0
    assert 0 <= summary["input_stall_pct"] <= 100
    # the namespace the demo leaves behind verifies clean
    verify = subprocess.run(
        [sys.executable, "-m", "torch_tgb.cli", "verify", str(tmp_path / "demo" / "ns")],
        capture_output=True, text=True, timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # one vocabulary: steps are TGBs, objects are files (the demo writes one object per TGB)
    assert "4 steps (4 TGBs in 4 objects" in verify.stdout and summary["verified_steps"] == 4
    # the run's timeline, drawn from what the namespace records
    png = tmp_path / "timeline.png"
    report = subprocess.run(
        [sys.executable, "-m", "torch_tgb.cli", "report", str(tmp_path / "demo" / "ns"), "--png", str(png), "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    series = json.loads(report.stdout)["series"]
    assert png.read_bytes()[:4] == b"\x89PNG" and series["committed"][-1][1] == 8
    assert [step for _, step in series["consumed"]] == [4, 8] and series["gc_step"] == 4


def test_demo_producers_commit_per_tgb_and_the_expected_slices_are_per_rank():
    import argparse

    from torch_tgb.cli._demo_run import _expected_digests, _producer_command

    args = argparse.Namespace(global_batch=4, seq_len=8, ranks=2, seed=0)
    command = _producer_command(args, "/ns", 1, 3)
    # one object per TGB, so the ranks read while the producers write
    assert command[command.index("--segment-mb") + 1] == "0" and command[command.index("--producer-id") + 1] == "p1"
    expected = _expected_digests(args, [2, 3])
    assert len(expected) == 2 and all(len(rank) == 5 for rank in expected) and expected[0] != expected[1]


def test_demo_rejects_a_non_empty_namespace_dir(tmp_path, capsys):
    import torch_tgb.cli.main as cli_main

    ns = tmp_path / "d" / "ns"
    ns.mkdir(parents=True)
    (ns / "something").write_text("x")
    assert cli_main.main(["demo", str(tmp_path / "d")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tgb: error:") and "not empty" in err and err.count("\n") == 1


@pytest.mark.slow
def test_demo_reports_a_failed_producer_instead_of_waiting(tmp_path, capsys, monkeypatch):
    import torch_tgb.cli._demo_run as demo_run
    import torch_tgb.cli.main as cli_main

    def failing(args, ns, index, steps):
        return [sys.executable, "-c", "import sys; sys.stderr.write('tgb: error: disk on fire\\n'); sys.exit(1)"]

    monkeypatch.setattr(demo_run, "_producer_command", failing)
    assert cli_main.main(["demo", str(tmp_path / "d"), "--steps", "4", "--global-batch", "2", "--seq-len", "4"]) == 1
    err = capsys.readouterr().err
    assert "demo producer p0 exited with 1: tgb: error: disk on fire" in err or "demo producer p1" in err
