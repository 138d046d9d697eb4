"""Issue 14: every shell command the README, docs/cli.md and docs/quickstart.md show runs.

Commands are the lines of ```bash blocks and the inline code spans that start
with ``tgb``/``torchrun``/``python``/``pip``/``git``, have arguments and name
no placeholder (``NS``, ``DIR``, ``...``; a bare ``tgb produce`` in prose
names a command, it is not one). Each one is in exactly one of two tables below:
``RUN`` (run as shown, at a tiny size: paths moved into a temporary directory
and size flags made small) or ``SKIP`` (with the reason). A command added to
the docs without an entry fails :func:`test_every_documented_command_is_classified`.

The README's Python quickstart snippet is run as a script too: it must run end
to end and terminate (the stream is sealed, the loop ends).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import ROOT, tgb_cli

DOCS = [ROOT / "README.md", ROOT / "docs" / "cli.md", ROOT / "docs" / "quickstart.md"]
_PLACEHOLDER = re.compile(r"\b(NS|DIR|SRC|NAME|COMMAND|ARGS|FILE|KEY|VALUE)\b|\.\.\.|\[|<")

#: documented command -> the reason it is not run here
SKIP = {
    "pip install torch==2.13.0 && pip install -e . && tgb demo": "installs packages (network); `tgb demo` is run below",
    "pip install torch==2.13.0": "installs packages (network)",
    "pip install -e .": "installs packages (network)",
    'pip install -e ".[prometheus]"': "installs packages (network)",
    'pip install -e ".[test,bench]"': "installs packages (network)",
    "pip wheel --no-deps -w dist .": "build isolation downloads setuptools (network)",
    "pip install dist/torch_tgb-*.whl": "installs packages",
    "git clone <this repository> torch_tgb && cd torch_tgb": "network; this is the checkout",
    "tgb reclaim s3://bucket/run1": "needs S3 credentials (the S3 path is tested against moto in tests/cli/test_s3.py)",
    "python examples/s3_namespace.py --ns s3://bucket/prefix --endpoint-url ...":
        "needs S3 credentials (tests/examples/test_s3_namespace.py runs it against moto)",
    'pip install -e ".[sources]"': "installs packages (network)",
    "torchrun --nproc-per-node 2 --standalone examples/train_vlm_torchrun.py --workdir /tmp/vlm":
        "tests/examples/test_train_vlm_torchrun.py runs it at a tiny size, with a preemption and a resume",
    "tgb prewarm gs://bucket/run1 --mesh dp=8,tp=2 --ranks 0-15 --steps 0:2000 --cache-dir /local_nvme/tgb "
    "--cache-bytes 500GiB": "needs GCS credentials (tests/cli/test_prewarm.py runs it against the emulators)",
    'pip install torch==2.13.0 && pip install -e ".[dev]" && pip install --no-deps torchtitan==0.3.0 '
    "&& python -m pytest -q tests":
        "installs packages (network) and runs this very suite",
    "tgb bench commit_cost -- --quick": "a benchmark (the bench branch's tests run them): minutes on a 2-core box",
    "tgb bench all --results-dir benchmarks/results && tgb bench report":
        "the full benchmark suite (about 25 minutes) and it rewrites the committed results and docs/benchmarks.md",
    "tgb bench report": "rewrites the committed docs/benchmarks.md (the bench branch's tests cover it)",
    "tgb produce /data/run1 --source webdataset:'shards/train-{0000..0099}.tar' --shard 0/2 --producer-id s0 --dp 8 "
    "--seq-len 2048 --global-batch 64": "needs a WebDataset corpus (--source runs on tiny ones in test_produce_source.py)",
    "tgb produce /data/run1 --source webdataset:'shards/train-{0000..0099}.tar' --shard 0/2 --producer-id s0 --dp 8 "
    "--seal": "needs a WebDataset corpus (--source runs on tiny ones in test_produce_source.py)",
    "tgb produce /data/run1 --source parquet:hf_dataset/data/ --column input_ids --shard 1/2 --producer-id s1 --dp 8 "
    "--seal": "needs a Parquet corpus (--source runs on tiny ones in test_produce_source.py)",
}

#: documented command -> the command run (``{tmp}``: the test's temporary directory), in document order
TINY = "--global-batch 8 --seq-len 16"
RUN = {
    "tgb demo": "tgb demo {tmp}/demo --steps 8 --global-batch 4 --seq-len 16 --compute-ms 0",
    "tgb inspect /tmp/tgb-demo-XXXX/ns": "tgb inspect {tmp}/demo/ns",
    "tgb verify  /tmp/tgb-demo-XXXX/ns": "tgb verify {tmp}/demo/ns",
    "tgb produce /data/run1 --producer-id p0 --steps 1000 --global-batch 64 --seq-len 2048 --dp 8":
        f"tgb produce {{tmp}}/run1 --producer-id p0 --steps 4 {TINY} --dp 8",
    "tgb produce /data/run1 --producer-id p1 --tokens corpus.npy --global-batch 64 --seq-len 2048 --dp 8":
        f"tgb produce {{tmp}}/run1 --producer-id p1 --tokens {{tmp}}/corpus.npy {TINY} --dp 8",
    "tgb seal /data/run1": "tgb seal {tmp}/run1",
    "tgb produce /tmp/run2 --source token-file:corpus.npy --offsets corpus.idx --shard 0/2 --dp 2":
        "tgb produce {tmp}/run2 --source token-file:{tmp}/corpus.npy --offsets {tmp}/corpus.idx --shard 0/2 --dp 2 "
        "--global-batch 4 --seq-len 16",
    "tgb convert corpus.llmbatch /data/corpus --dp 8": "tgb convert {tmp}/corpus.llmbatch {tmp}/corpus --dp 8",
    "torchrun --nproc-per-node 2 --standalone examples/train_gpt_torchrun.py --workdir /tmp/run":
        "torchrun --nproc-per-node 2 --standalone examples/train_gpt_torchrun.py --workdir {tmp}/run "
        "--steps 4 --ckpt-every 2 --global-batch 4 --seq-len 8 --d-model 16 --layers 1 --producers 1",
    "python examples/static_corpus.py --ns /tmp/corpus":
        "python examples/static_corpus.py --ns {tmp}/static --docs 60 --seq-len 16 --global-batch 4",
    "python docs/gen_api.py": "python docs/gen_api.py --output {tmp}/api.md",
    "python -m torch_tgb.cli": "python -m torch_tgb.cli --help",
    "tgb COMMAND --help": "tgb COMMAND --help",  # run for every subcommand
}


def documented_commands() -> list[str]:
    found: list[str] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for line in block.splitlines():
                line = line.split(" #", 1)[0].rstrip()
                if line.strip():
                    found.append(line)
        for span in re.findall(r"`((?:tgb|torchrun|python|pip|git) [^`]+)`", text):
            if span in RUN or span in SKIP:
                found.append(span)
            elif not _PLACEHOLDER.search(span) and len(span.split()) > 2:  # `tgb produce` in prose names a command
                found.append(span)
    return list(dict.fromkeys(found))


def test_every_documented_command_is_classified():
    unknown = [c for c in documented_commands() if c not in RUN and c not in SKIP]
    assert not unknown, f"documented commands with no entry in RUN or SKIP: {unknown}"
    assert not set(RUN) & set(SKIP)


def _prepare(tmp: Path) -> None:
    import numpy as np

    from torch_tgb.format.llmbatch import write_llmbatch

    np.save(tmp / "corpus.npy", (np.arange(8 * 16 * 3 + 1) % 50).astype(np.uint16))
    with open(tmp / "corpus.idx", "wb") as f:  # document boundaries of corpus.npy, an int64 .npy array
        np.save(f, np.array([0, 100, 200, 300, 8 * 16 * 3 + 1], dtype=np.int64))
    write_llmbatch(tmp / "corpus.llmbatch", (np.arange(16 * 16) % 50).astype(np.int32).reshape(16, 16), batch_size=8)


def _run(command: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command.format(tmp=tmp))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TGB_PROGRESS": "0"}
    if argv[0] == "tgb":
        return tgb_cli(*argv[1:], timeout=300, cwd=ROOT)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_documented_commands_run(tmp_path):
    _prepare(tmp_path)
    order = [c for c in documented_commands() if c in RUN]
    assert "tgb demo" in order and "tgb seal /data/run1" in order
    from torch_tgb.cli.main import SUBCOMMANDS

    for documented in order:
        commands = [RUN[documented].replace("COMMAND", name) for name in SUBCOMMANDS] \
            if documented == "tgb COMMAND --help" else [RUN[documented]]
        for command in commands:
            proc = _run(command, tmp_path)
            assert proc.returncode == 0, f"{documented!r} ran as {command!r}: exit {proc.returncode}\n" \
                                         f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def test_readme_quickstart_snippet_runs_and_terminates(tmp_path):
    """The README's produce/consume snippet, as a script: it ends (sealed stream) and delivers 100 steps."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    snippets = re.findall(r"```python\n(.*?)```", text, re.S)
    assert snippets, "README has no python snippet"
    script = tmp_path / "quickstart.py"
    script.write_text(snippets[0], encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[:1] == ["100"] and "torch.Size([4, 128])" in proc.stdout
