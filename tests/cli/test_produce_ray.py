"""``tgb produce --ray``: a ``--source`` produced by a fleet of Ray actors, exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import torch_tgb.cli.main as cli_main
from tests.cli.test_produce_source import expected, spans
from tests.sources._corpus import make_docs, write_parquet, write_token_file


def test_ray_flags_need_a_source_and_a_reachable_cluster(tmp_path, capsys) -> None:
    ns = str(tmp_path / "ns")
    assert cli_main.main(["produce", ns, "--ray", "local", "--producers", "2"]) == 1
    assert "give --source" in capsys.readouterr().err
    tokens, offsets = write_token_file(tmp_path, make_docs(10))
    source = ["--source", f"token-file:{tokens}", "--offsets", offsets]
    assert cli_main.main(["produce", ns, *source, "--ray", "local", "--shard", "1/2"]) == 1
    assert "--shards" in capsys.readouterr().err
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    assert cli_main.main(["produce", ns, *source, "--ray", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the Ray cluster at '127.0.0.1:1'" in err
    assert not os.path.exists(ns)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_produce_ray_local_fleet_exactly_once(tmp_path) -> None:
    """Two sources mixed, packed and kk-balanced in every actor (the --source pipeline, shared)."""
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    docs, more = make_docs(90, seed=7), make_docs(40, seed=8)
    tokens, offsets = write_token_file(tmp_path, docs)
    (tmp_path / "code").mkdir()
    write_parquet(tmp_path / "code", more)
    ns = str(tmp_path / "ns")
    cmd = [sys.executable, "-m", "torch_tgb.cli", "produce", ns, "--source", f"web=token-file:{tokens}", "--offsets",
           offsets, "--source", f"code=parquet:{tmp_path / 'code'}", "--mix", "web=2,code=1", "--balance", "kk",
           "--ray", "local", "--producers", "2", "--shards", "3", "--seq-len", "32", "--global-batch", "4",
           "--dp", "2", "--json"]  # no --seal: a fleet's job seals when every shard is done (issue 25)
    env = dict(os.environ, TGB_PROGRESS="0", OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=380, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["sealed"] and report["num_shards"] == 3 and report["steps"] > 0
    assert sorted(p["producer_id"] for p in report["producers"]) == [f"cli-shard0000{i}-of00003" for i in range(3)]
    assert spans(ns) == expected(docs + more)
