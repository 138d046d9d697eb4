from __future__ import annotations

import torch_tgb.cli.main as cli_main

_SCRIPT = '''"""Echo the arguments (a fake benchmark)."""
import sys
print("ARGS", sys.argv[1:])
sys.exit(3 if "--fail" in sys.argv else 0)
'''


def test_bench_lists_and_runs_with_passthrough(tmp_path, capfd):
    (tmp_path / "echo_args.py").write_text(_SCRIPT)
    (tmp_path / "test_bench_x.py").write_text("")  # pytest-benchmark files are not scripts
    (tmp_path / "_helper.py").write_text("")
    assert cli_main.main(["bench", "--dir", str(tmp_path)]) == 0
    listing = capfd.readouterr().out
    assert "echo_args  Echo the arguments (a fake benchmark)." in listing
    assert "test_bench_x" not in listing and "_helper" not in listing

    assert cli_main.main(["bench", "--dir", str(tmp_path), "echo_args", "--size", "2", "-x"]) == 0
    assert "ARGS ['--size', '2', '-x']" in capfd.readouterr().out
    assert cli_main.main(["bench", "--dir", str(tmp_path), "echo_args.py", "--", "--fail"]) == 3


def test_bench_unknown_name_lists_available(tmp_path, capsys):
    (tmp_path / "one.py").write_text("")
    assert cli_main.main(["bench", "--dir", str(tmp_path), "two"]) == 1
    err = capsys.readouterr().err
    assert "no benchmark named 'two'" in err and "available: one" in err


def test_bench_lists_suites(tmp_path, capsys):
    (tmp_path / "echo_args.py").write_text(_SCRIPT)
    assert cli_main.main(["bench", "--dir", str(tmp_path)]) == 0
    assert "suites: quick" in capsys.readouterr().out


def test_bench_quick_completes_and_writes_valid_json(tmp_path, capfd):
    """The real quick suite (no peers, no redis): it finishes and every result file is valid JSON."""
    import json
    from pathlib import Path

    import pytest

    bench_dir = Path(__file__).resolve().parents[2] / "benchmarks"
    if not (bench_dir / "peers.py").exists():
        pytest.skip("benchmarks/ is not in this checkout")
    out = tmp_path / "results"
    # end_to_end --quick has its own test below (it checks the whole result file)
    assert cli_main.main(["bench", "--dir", str(bench_dir), "quick", "--results-dir", str(out),
                          "--skip", "end_to_end"]) == 0
    printed = capfd.readouterr().out
    assert str(out) in printed
    written = sorted(p.stem for p in out.glob("*.json"))
    assert {"peers", "peers_s3", "getbatch", "commit_cost", "ingest_quick", "provenance_cost_quick",
            "lineage_lookup_quick"} <= set(written), written
    for path in out.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["machine"]["cores"] >= 1
    page = tmp_path / "docs" / "benchmarks.md"
    assert cli_main.main(["bench", "--dir", str(bench_dir), "report", "--results-dir", str(out), "--out",
                          str(page)]) == 0
    s3 = json.loads((out / "peers_s3.json").read_text())
    assert "skipped" in s3 or s3["peers"]["torch_tgb"]["matches_local"], s3  # moto is in the test extra
    assert "torch_tgb" in page.read_text() and (tmp_path / "docs" / "benchmarks" / "peers.png").exists()
    section = page.read_text().split("## 7.")[1]  # issue 28's section, from ingest --quick's own figures
    assert "| token-file | none |" in section and "B/token" in section, section[:2000]


def test_bench_e2e_quick_runs_every_setup_and_writes_a_complete_result(tmp_path, capfd):
    """``tgb bench e2e --quick`` (issue 29 at tiny sizes): every setup ran and delivered every sample once, the
    calibration, schedule, crash, projection and goals are in the file, and the report renders it. No speed."""
    import json
    from pathlib import Path

    import pytest

    bench_dir = Path(__file__).resolve().parents[2] / "benchmarks"
    if not (bench_dir / "end_to_end.py").exists():
        pytest.skip("benchmarks/ is not in this checkout")
    pytest.importorskip("simplejpeg")
    pytest.importorskip("webdataset")
    out = tmp_path / "results"
    rc = cli_main.main(["bench", "--dir", str(bench_dir), "e2e", "--quick", "--results-dir", str(out)])
    printed = capfd.readouterr()
    assert rc == 0, printed.out[-3000:] + printed.err[-3000:]  # a failure prints its reason: show it
    r = json.loads((out / "end_to_end.json").read_text())
    assert r["quick"] and (r["nodes"]["overlap"] or set(r["nodes"]["T"]).isdisjoint(r["nodes"]["P"]))
    assert r["machine_note"] and r["gpu"] and {"budget_s", "waited_s", "disturbed"} <= set(r["gate"])
    try:
        import ray  # noqa: F401

        expected = {"a0", "a1", "a2", "b", "b_zstd", "c", "a2_shared", "b_shared"}
    except ImportError:
        expected = {"a0", "a1", "a2", "b", "b_zstd", "a2_shared", "b_shared"}
    resolutions = set(r["summary"])
    assert {str(x) for x in r["config"]["resolutions"]} <= resolutions
    for res in resolutions:
        cal = r["calibration"][res][0]
        assert cal["S_s"] > 0 and cal["D_s"] > 0 and cal["S_read_s"] > 0
        assert set(r["runs"][res]) == expected
        for name, rows in r["runs"][res].items():
            for row in rows:  # every run finished and delivered each of its samples exactly once
                assert row["error"] is None and row["steps_per_s"] > 0, (res, name, row)
                assert row["exactly_once"]["ok"], (res, name, row["exactly_once"])
                assert row["exactly_once"]["complete_expected"] or name.startswith("a"), (res, name)
                assert row["cpu_T_s_per_step"] > 0 and row["bytes_per_step"] > 0
        s = r["summary"][res]
        assert {"b_over_best_a", "b_over_best_a_over_ideal", "b_zstd_over_b"} <= set(s["ratios"])
        # the same batches stored compressed: fewer bytes at rest, read by the trainer's reader side by side
        assert cal["S_read_zstd_s"] > 0 and cal["D_zstd_s"] > 0
        assert cal["at_rest_zstd_bytes_per_step"] < cal["at_rest_bytes_per_step"]
        assert s["compressed"]["reader_zstd_over_plain"]["median"] > 0
        assert s["bound_disaggregated"]["median"] >= s["bound_colocated"]["median"]
    for name, rows in r["schedule"]["runs"].items():
        assert rows and all("after_steps_per_s" in row for row in rows), (name, rows)
    crash = r["crash"]
    # (a) dies with its worker
    assert crash["a"]["killed"] and crash["a"]["error"] and not crash["a"]["survived"], crash["a"]
    for name in ("b", "c") if "c" in expected else ("b",):  # killed mid-production, and nothing lost
        assert crash[name]["killed"] and crash[name]["producer_running_at_kill"], crash[name]
        assert crash[name]["survived"] and crash[name]["steps_lost"] == 0, crash[name]
        assert crash[name]["exactly_once"]["ok"] and crash[name]["exactly_once"]["images_match_recomputation"]
    assert r["profile"]["top"] and r["profile"]["groups"]["training step (forward, backward, AdamW)"] > 0
    assert {row["resolution"] for row in r["projection"]} == {int(x) for x in resolutions}
    assert all({"P4", "P16", "P32", "ratio_P32"} <= set(row) for row in r["projection"])
    assert {"disaggregated_at_least_0.9_of_bound", "b_over_a_at_least_0.9_of_ideal",
            "crossover_ratio_at_least_1.7", "killed_producer_loses_nothing"} <= set(r["goals"])
    assert set(r["goals"]["b_over_a_at_least_0.9_of_ideal"]["per_side_model"]) == {f"b@{x}" for x in resolutions}
    assert "quiet_rounds" in r  # None in quick mode: no quiet gate
    assert r["goals"]["killed_producer_loses_nothing"]["met"]
    page = tmp_path / "docs" / "benchmarks.md"
    assert cli_main.main(["bench", "--dir", str(bench_dir), "report", "--results-dir", str(out), "--out",
                          str(page)]) == 0
    text = page.read_text()
    assert "disaggregated producers vs colocated loading" in text and "Projection" in text
    assert "Failure isolation" in text and "Verdict" in text and "Profile of the trainer" in text
    assert (tmp_path / "docs" / "benchmarks" / "end_to_end.png").exists()
    capfd.readouterr()
