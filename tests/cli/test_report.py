"""`tgb report --png` draws a namespace's timeline; `tgb inspect --watch` keeps a live page of it."""

from __future__ import annotations

import io
import json

import pytest

import torch_tgb.cli.main as cli_main
from torch_tgb.checkpoint import Reclaimer, record_watermark
from torch_tgb.cursor import CURSOR_KEY, Cursor

from tests.cli.conftest import write_namespace

pytest.importorskip("matplotlib")


def _checkpoint(ns: str, name: str, step: int) -> None:
    record_watermark(ns, name, {CURSOR_KEY: Cursor(step).to_json()})


def test_report_draws_the_timeline_and_prints_its_series(tmp_path, capsys):
    ns = write_namespace(tmp_path / "ns", steps=6)
    _checkpoint(ns, "c2", 2)
    _checkpoint(ns, "c5", 5)
    png = tmp_path / "timeline.png"
    assert cli_main.main(["report", ns, "--png", str(png), "--max-lag", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    s = out["series"]
    # one version per step (naive policy; registering p0 takes none), the seal
    assert [p[1] for p in s["committed"]] == [1, 2, 3, 4, 5, 6, 6]
    assert [p[1] for p in s["consumed"]] == [2, 5] and s["max_lag"] == 4
    assert s["lead"][-1][1] == 6 - 5  # committed minus the newest checkpoint
    assert s["steps"] == list(range(6)) and s["tokens"] == [4 * 8] * 6 and s["imbalance"] == [1.0] * 6
    assert s["bytes_committed"][-1][1] > 0 and out["summary"]["bytes_stored"] > 0
    # after reclamation the history starts at the GC boundary: what the log still holds
    Reclaimer(ns).run_once()
    assert cli_main.main(["report", ns, "--json", "--no-sizes"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["summary"]["gc_step"] == 2 and after["series"]["steps"][0] <= 2
    assert cli_main.main(["report", ns]) == 0
    assert "steps committed" in capsys.readouterr().out


def test_watch_prints_live_pages_with_rates_and_stops(tmp_path):
    from torch_tgb.cli._watch import watch

    ns = write_namespace(tmp_path / "ns", steps=3, seal=False)
    clock = iter([100.0, 102.0])
    out = io.StringIO()
    assert watch(ns, interval=0.01, count=2, out=out, clock=lambda: next(clock)) == 0
    first, second = out.getvalue().split("\n\ntgb inspect --watch")
    assert first.startswith(f"tgb inspect --watch file://{tmp_path / 'ns'}") and "steps     3\n" in first
    assert "steps     3 (0 TGBs/s)" in second and "producers (1)" in second and "p0" in second
    assert "skipped   " in second and "storage   " in second


def test_watch_ends_cleanly_on_ctrl_c(tmp_path, monkeypatch, capsys):
    import time

    ns = write_namespace(tmp_path / "ns", steps=2)

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupted)
    assert cli_main.main(["inspect", ns, "--watch", "5"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("stopped watching")


def test_inspect_and_watch_sum_skips_by_reason_alike():
    from torch_tgb.cli._inspect_impl import skipped_by_reason, skipped_samples_text

    producers = [{"skipped": {"corrupt": 2, "too_long": 1}}, {"skipped": {"corrupt": 3}}, {"id": "p2"}]
    assert skipped_by_reason(producers) == {"corrupt": 5, "too_long": 1}
    assert skipped_by_reason([{"id": "p0"}]) is None  # nothing recorded differs from zero skips
    assert skipped_by_reason([{"skipped": {}}]) == {}
    assert skipped_samples_text(producers) == "6 (corrupt 5, too_long 1)"
    assert skipped_samples_text([{"id": "p0"}]) == "0"
