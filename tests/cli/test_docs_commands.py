"""Issues 14 and 25: every shell command README.md and docs/*.md show runs.

Commands are the lines of ```bash blocks (a block preceded by
``<!-- skip: REASON -->`` is not run, see ``tests/docs/_snippets.py``) and the
inline code spans that start with ``tgb``/``torchrun``/``python``/``pip``/``git``,
have arguments and name no placeholder (``NS``, ``DIR``, ``I/N``, ``...``; a bare
``tgb produce`` in prose names a command, it is not one). Every page is picked
up (``tests.docs._snippets.documents``).

Each command runs, in document order, page by page, in a working directory
holding every file the docs name (``tests/docs/_workspace.py``), rewritten only
as :func:`tiny` says: the docs' absolute paths moved into that directory and
size flags made small. The few that need more are in ``RUN`` (the command
run instead) or, for inline spans that cannot run here, in ``SKIP`` (with the
reason).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import tgb_cli
from tests.docs._snippets import ROOT, blocks, documents
from tests.docs._workspace import localize, prepare

_PLACEHOLDER = re.compile(r"\b(NS|DIR|SRC|NAME|COMMAND|ARGS|FILE|KEY|VALUE|I/N)\b|\.\.\.|\[|<")
_SPAN = re.compile(r"`((?:tgb|torchrun|python|pip|git) [^`]+)`")

#: inline command -> the reason it is not run here (a ```bash block says it with a skip directive instead)
SKIP = {
    "tgb reclaim s3://bucket/run1": "needs S3 credentials (the S3 path is tested against moto in tests/cli/test_s3.py)",
    "python examples/s3_namespace.py --ns s3://bucket/prefix --endpoint-url ...":
        "needs S3 credentials (tests/examples/test_s3_namespace.py runs it against moto)",
    "torchrun --nproc-per-node 2 --standalone examples/train_vlm_torchrun.py --workdir /tmp/vlm":
        "tests/examples/test_train_vlm_torchrun.py runs it at a tiny size, with a preemption and a resume",
    "tgb prewarm gs://bucket/run1 --mesh dp=8,tp=2 --ranks 0-15 --steps 0:2000 --cache-dir /local_nvme/tgb "
    "--cache-bytes 500GiB": "needs GCS credentials (tests/cli/test_prewarm.py runs it against the emulators)",
    "tgb inspect gs://bucket/run1 -o project=my-project":
        "needs GCS credentials (tests/storage/test_cloud_stores.py runs the CLI against fake-gcs-server)",
    "tgb bench commit_cost -- --quick": "a benchmark (the bench branch's tests run them): minutes on a 2-core box",
    "tgb bench all --results-dir benchmarks/results && tgb bench report":
        "the full benchmark suite (about 25 minutes) and it rewrites the committed results and docs/benchmarks.md",
    "tgb bench report": "rewrites the committed docs/benchmarks.md (the bench branch's tests cover it)",
}

#: commands never run here: they install packages or clone (network), and this is the checkout under test
_NEVER = ("pip ", "git ")

#: documented command -> the command run instead (``{root}``: this checkout), where tiny() is not enough
RUN = {
    "tgb demo": "tgb demo /tmp/tgb-demo-XXXX --steps 8 --global-batch 4 --seq-len 16 --compute-ms 0",
    "torchrun --nproc-per-node 2 --standalone examples/train_gpt_torchrun.py --workdir /tmp/run":
        "torchrun --nproc-per-node 2 --standalone {root}/examples/train_gpt_torchrun.py --workdir /tmp/run "
        "--steps 4 --ckpt-every 2 --global-batch 4 --seq-len 8 --d-model 16 --layers 1 --producers 1",
    "python examples/static_corpus.py --ns /tmp/corpus":
        "python {root}/examples/static_corpus.py --ns /tmp/static --docs 60 --seq-len 16 --global-batch 4",
    "python docs/gen_api.py": "python {root}/docs/gen_api.py --output /tmp/api.md",  # not over docs/api.md
    "python -m torch_tgb.cli": "python -m torch_tgb.cli --help",
    "tgb COMMAND --help": "tgb COMMAND --help",  # run for every subcommand
}

#: size flags of `tgb` and the value run instead (the global batch follows --dp, so it stays divisible)
_SIZES = {"--steps": "4", "--seq-len": "16", "--producers": "2"}


def documented_commands(page: Path) -> list[str]:
    """The commands ``page`` shows, in order (lines of runnable bash blocks, then runnable inline spans)."""
    found: list[str] = []
    for block in blocks(page, ("bash",)):
        if block.skip is not None:
            continue
        for line in block.code.splitlines():
            line = line.split(" #", 1)[0].rstrip()
            if line.strip():
                found.append(line)
    for span in _SPAN.findall(page.read_text(encoding="utf-8")):
        if span in RUN or span in SKIP or _looks_runnable(span):
            found.append(span)
    return list(dict.fromkeys(found))


def _looks_runnable(span: str) -> bool:
    """A span with an argument after the subcommand and no placeholder: `tgb produce --rate` names an option."""
    words = span.split()
    return not _PLACEHOLDER.search(span) and len(words) > 2 and not words[2].startswith("-")


def tiny(command: str) -> str:
    """``command`` as run here: ``RUN``'s version, else small sizes and ``--ray local``."""
    if command in RUN:
        return RUN[command].replace("{root}", str(ROOT))
    argv = shlex.split(command)
    if argv[0] != "tgb":
        return command
    dp = argv[argv.index("--dp") + 1] if "--dp" in argv else "1"
    out = []
    for i, arg in enumerate(argv):
        flag = argv[i - 1] if i else ""
        if flag in _SIZES:
            arg = _SIZES[flag]
        elif flag == "--global-batch":
            arg = str(max(int(dp), 4) // int(dp) * int(dp))
        elif flag == "--ray":
            arg = "local"
        out.append(arg)
    return shlex.join(out)


def _run(command: str, ws: Path) -> subprocess.CompletedProcess[str]:
    # the checkout may itself live under /tmp (a fresh clone): its paths are not the docs' to move
    argv = shlex.split(localize(command.replace(str(ROOT), "\0"), ws, shell=True).replace("\0", str(ROOT)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TGB_PROGRESS": "0"}
    if argv[0] == "tgb":
        return tgb_cli(*argv[1:], timeout=300, cwd=ws)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return subprocess.run(argv, env=env, cwd=ws, capture_output=True, text=True, timeout=300)


PAGES = [page for page in documents() if documented_commands(page)]


def test_skips_name_documented_commands() -> None:
    every = {c for page in documents() for c in documented_commands(page)}
    assert not set(RUN) & set(SKIP)
    assert set(SKIP) <= every and set(RUN) <= every, "an entry for a command the docs no longer show"


def test_sizes_are_made_small() -> None:
    assert tiny("tgb produce /data/run1 --steps 1000 --global-batch 64 --seq-len 2048 --dp 8") == \
        "tgb produce /data/run1 --steps 4 --global-batch 8 --seq-len 16 --dp 8"
    assert tiny("tgb produce NS --source x --ray HOST:PORT --producers 8") == \
        "tgb produce NS --source x --ray local --producers 2"


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_commands_run(page: Path, tmp_path: Path) -> None:
    from torch_tgb.cli.main import SUBCOMMANDS

    ws = tmp_path / "ws"
    ws.mkdir()
    prepare(ws)
    for documented in documented_commands(page):
        if documented in SKIP or documented.startswith(_NEVER):
            continue
        command = tiny(documented)
        commands = [command.replace("COMMAND", name) for name in SUBCOMMANDS] if "COMMAND" in command else [command]
        for run in commands:
            proc = _run(run, ws)
            assert proc.returncode == 0, f"{page.name}: {documented!r} ran as {run!r}: exit {proc.returncode}\n" \
                                         f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
