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
    assert cli_main.main(["bench", "--dir", str(bench_dir), "quick", "--results-dir", str(out)]) == 0
    printed = capfd.readouterr().out
    assert str(out) in printed
    written = sorted(p.stem for p in out.glob("*.json"))
    assert {"peers", "peers_s3", "getbatch", "end_to_end", "commit_cost"} <= set(written), written
    for path in out.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["machine"]["cores"] >= 1
    page = tmp_path / "docs" / "benchmarks.md"
    assert cli_main.main(["bench", "--dir", str(bench_dir), "report", "--results-dir", str(out), "--out",
                          str(page)]) == 0
    s3 = json.loads((out / "peers_s3.json").read_text())
    assert "skipped" in s3 or s3["peers"]["torch_tgb"]["matches_local"], s3  # moto is in the test extra
    assert "torch_tgb" in page.read_text() and (tmp_path / "docs" / "benchmarks" / "peers.png").exists()
