"""``benchmarks/scale.py --tiny``: every section runs on this checkout and writes figures that hold together.

Only this checkout is measured (``--base none``): the before/after figures of
docs/benchmarks.md come from a full run. The checks are on the counts the
sections report, which are exact (a counting store), never on time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scale.py"

pytestmark = pytest.mark.slow


def test_every_section_runs_and_reports_sound_counts(tmp_path) -> None:
    if not SCRIPT.exists():
        pytest.skip("benchmarks/ is not in this checkout")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--base", "none", "--results-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "scale_tiny.json").read_text())["rows"]
    got = {r["section"]: r["after"] for r in rows}
    assert set(got) >= {"startup", "footer", "fold", "versions_memory", "shuffled_manifest", "bytes_at_rest",
                        "encode", "state_bytes", "reclaim", "commit_requests"}
    # a reader's start-up does not read the producers' pipeline states
    assert got["startup"]["counts"]["bytes"] < 20 * 8192
    # a rank's footer bytes per step: its slice record, not the whole footer
    assert 0 < got["footer"]["footer_bytes_per_rank_step"] <= 4096
    # token rows at rest: close to the token width (uint16), not padded to pages
    assert got["bytes_at_rest"]["bytes_per_token"] <= 2.2
    # an idle reclaimer pass does O(1) requests; a reclaiming one O(objects), not O(live history)
    # (about 1 per object at 1,000 objects: docs/benchmarks.md; a few dozen fixed requests show at 100)
    assert got["reclaim"]["idle"]["requests"] <= 10
    reclaiming = got["reclaim"]["reclaiming"]
    assert reclaiming["objects"] == 100 and reclaiming["requests"] <= 2 * reclaiming["objects"] + 40
    assert got["commit_requests"]["successes"] > 0
