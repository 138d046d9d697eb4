"""Issue 25 edges met on a fresh clone: what a new user's first commands print.

- ``tgb inspect``/``tgb verify`` on ``s3://missing-bucket/...`` name the missing
  bucket (they said "no TGB namespace here");
- ``tgb produce`` without ``--seal`` printed "offsets 0..-1 were already
  committed, nothing to write" right after writing;
- the README's shell line is the same shard of the same job as its Python
  snippet: run after it on the same path, it finds the shard complete (it
  used to fail with "fingerprint disagrees").
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import torch_tgb.cli.main as cli_main
from tests.cli.conftest import ROOT, tgb_cli


@pytest.mark.s3
@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_missing_bucket_is_named(s3_server, capsys, command: str) -> None:
    url, opts = s3_server.namespace("edge")
    missing = "s3://no-such-bucket-25/run1"
    so = ["-o", f"endpoint_url={opts['endpoint_url']}", "-o", f"key={opts['key']}", "-o", f"secret={opts['secret']}",
          "-o", f"client_kwargs.region_name={opts['client_kwargs']['region_name']}"]
    code = cli_main.main([command, missing, *so])
    out = capsys.readouterr()
    said = out.out + out.err  # inspect fails in one line; verify reports it as its problem
    assert code == 1 and "bucket 'no-such-bucket-25' does not exist" in said, said
    assert "no TGB namespace here" not in said


def test_produce_without_seal_says_what_it_wrote(tmp_path, capsys) -> None:
    ns = str(tmp_path / "ns")
    assert cli_main.main(["produce", ns, "--steps", "3", "--global-batch", "2", "--seq-len", "4"]) == 0
    out = capsys.readouterr().out
    assert "wrote offsets 0..2 (3 TGBs)" in out and "nothing to write" not in out
    assert cli_main.main(["produce", ns, "--steps", "3", "--global-batch", "2", "--seq-len", "4"]) == 0
    assert "offsets 0..2 were already committed, nothing to write" in capsys.readouterr().out


def test_the_readme_shell_line_is_its_python_snippet(tmp_path) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = re.findall(r"```python\n(.*?)```", text, re.S)[1]
    line = re.search(r"`(tgb produce /tmp/run2 [^`]+)`", text).group(1)
    rng = np.random.default_rng(0)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(1, 3000, size=120))]).astype(np.int64)
    np.save(tmp_path / "corpus.npy", (np.arange(offsets[-1]) % 50_000).astype(np.uint16))
    offsets.tofile(tmp_path / "corpus.idx")  # raw int64, as the README says
    ns = str(tmp_path / "run2")
    script = tmp_path / "snippet.py"
    script.write_text("import torch\nimport torch_tgb as tgb\n" + snippet.replace("/tmp/run2", ns))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TGB_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("cli-shard00000-of00002 ")
    argv = line.replace("/tmp/run2", ns).split()[1:]
    shell = tgb_cli(*argv, cwd=tmp_path)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.startswith("shard 0/2 already complete (offsets 0..")
    other = tgb_cli(*[a if a != "0/2" else "1/2" for a in argv], cwd=tmp_path)
    assert other.returncode == 0 and "the namespace is sealed" in other.stdout, other.stderr
