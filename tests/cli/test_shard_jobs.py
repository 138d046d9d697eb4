"""Issue 25 from the shell: ``tgb produce --shard I/N`` as a scheduler runs it (Slurm arrays, Kubernetes jobs).

The reported run: two shards started at the same time, each with ``--seal``,
both took the producer id ``cli``: one was fenced, the other sealed a
namespace missing most of the first shard; one after another, the first
sealed and the second could not start; a rerun of a finished shard exited 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import torch_tgb.cli.main as cli_main
from tests.cli.conftest import ROOT
from tests.cli.test_produce_source import SEQ, expected, spans
from tests.sources._corpus import make_docs, write_token_file


@pytest.fixture
def corpus(tmp_path):
    docs = make_docs(60, seed=3)
    tokens, offsets = write_token_file(tmp_path, docs)
    return docs, ["--source", f"token-file:{tokens}", "--offsets", offsets]


def produce_args(ns: str, source: list[str], *extra: str) -> list[str]:
    return ["produce", ns, *source, "--seq-len", str(SEQ), "--global-batch", "4", "--dp", "2", *extra]


def tgb(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli_main.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_two_shards_started_at_once_with_seal_give_a_complete_namespace(tmp_path, corpus, capsys) -> None:
    docs, source = corpus
    ns = str(tmp_path / "ns")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TGB_PROGRESS": "0"}
    procs = [subprocess.Popen([sys.executable, "-m", "torch_tgb.cli", *produce_args(ns, source, "--shard", f"{i}/2",
                                                                                     "--seal")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert spans(ns) == expected(docs)  # every document of both shards, once
    code, out, _ = tgb(capsys, "inspect", ns, "--json", "--no-sizes")
    report = json.loads(out)
    assert report["sealed"] and report["job"]["counts"] == {"done": 2, "running": 0, "stopped": 0, "not started": 0}
    assert sorted(p["id"] for p in report["producers"]) == ["cli-shard00000-of00002", "cli-shard00001-of00002"]
    assert tgb(capsys, "verify", ns)[0] == 0


def test_shards_one_after_another_then_a_retry_of_a_done_one(tmp_path, corpus, capsys) -> None:
    docs, source = corpus
    ns = str(tmp_path / "ns")
    code, out, err = tgb(capsys, *produce_args(ns, source, "--shard", "1/2", "--seal"))
    assert code == 0, err
    assert "shard 1/2: done; the namespace is sealed when shard 0/2 (not started) is done too" in out
    code, out, _ = tgb(capsys, "inspect", ns)
    assert "job 'cli' of 2 shards: 1 done, 1 not started" in out
    assert "waiting for shard 0/2 (not started)" in out
    code, out, err = tgb(capsys, *produce_args(ns, source, "--shard", "0/2"))
    assert code == 0, err
    assert "shard 0/2: done; the namespace is sealed (end of stream)" in out
    code, out, err = tgb(capsys, *produce_args(ns, source, "--shard", "1/2", "--seal"))  # the scheduler's retry
    assert code == 0, err
    assert out.startswith("shard 1/2 already complete (offsets 0..") and "the namespace is sealed" in out
    assert spans(ns) == expected(docs)


def test_a_shard_of_another_job_is_refused(tmp_path, corpus, capsys) -> None:
    _, source = corpus
    ns = str(tmp_path / "ns")
    assert tgb(capsys, *produce_args(ns, source, "--shard", "0/2", "--steps", "1"))[0] == 0
    code, _, err = tgb(capsys, *produce_args(ns, source, "--shard", "2/3"))
    assert code == 1 and "namespace declares job 'cli' of 2 shards" in err and "of 3 shards" in err
    code, _, err = tgb(capsys, *produce_args(ns, source, "--shard", "1/2", "--producer-id", "other"))
    assert code == 1 and "belongs to job 'other' of 2 shards" in err
    code, _, err = tgb(capsys, "produce", ns, "--shard", "1/2", "--steps", "1")
    assert code == 1 and "--shard I/N runs shard I of a --source corpus" in err


def test_plain_seal_is_refused_force_names_what_is_missing(tmp_path, corpus, capsys) -> None:
    _, source = corpus
    ns = str(tmp_path / "ns")
    assert tgb(capsys, *produce_args(ns, source, "--shard", "0/3"))[0] == 0
    assert tgb(capsys, *produce_args(ns, source, "--shard", "1/3", "--no-seal"))[0] == 0
    code, _, err = tgb(capsys, "seal", ns)
    assert code == 1 and "shard 1/3 (stopped), shard 2/3 (not started) of job 'cli' of 3 shards are not done" in err
    code, out, err = tgb(capsys, "seal", ns, "--force")
    assert code == 0, err
    assert "sealed by force: shard 1/3 (stopped), shard 2/3 (not started) did not finish" in out
    code, out, _ = tgb(capsys, "inspect", ns)
    assert "yes, by force: shard 1/3, shard 2/3 did not finish" in out
