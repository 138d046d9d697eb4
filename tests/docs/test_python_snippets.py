"""Issue 25: every Python snippet of README.md and docs/*.md runs, in order, page by page, at tiny sizes.

A page's snippets run in one fresh process, in the order of the page (later
snippets use what earlier ones defined, as a reader's session would), in a
working directory holding every file the docs name (``_workspace.py``), after
a prelude defining the names the pages use without defining them (``ns``,
``make_global_batch``, ``web_docs``, ``producer``, ...). S3 namespaces
(``s3://bucket/...``) live on a loopback moto server. The only rewrites of a
snippet are listed in :data:`REWRITES`, each with its reason. A snippet that
cannot run here carries ``<!-- skip: REASON -->`` in the page (``_snippets.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs._snippets import ROOT, blocks, documents
from tests.docs._workspace import PRELUDE, localize, prepare

PAGES = [page for page in documents() if blocks(page, ("python",))]

#: (pattern, replacement, why): the only changes made to a snippet before it runs (besides ``localize``)
REWRITES = [
    (r"https://(s3\.example\.com|s3\.[a-z0-9-]+\.amazonaws\.com|minio:9000)", "{endpoint}",
     "S3 endpoints of the docs are the loopback moto server"),
    (r"start_metrics_server\(\d+", "start_metrics_server(0", "a fixed port may be taken on a test machine"),
    (r"num_producers=\d+", "num_producers=2", "eight Ray actors do not fit a 2-core test machine"),
    (r"num_shards=\d+", "num_shards=4", "64 shards of a corpus of 120 documents are mostly empty"),
]


@pytest.fixture(scope="module")
def s3():
    from torch_tgb.testing.s3server import moto_s3_server

    with moto_s3_server(bucket="bucket") as server:
        yield server


def _rewrite(code: str, ws: Path, endpoint: str) -> str:
    for pattern, replacement, _why in REWRITES:
        code = re.sub(pattern, replacement.replace("{endpoint}", endpoint), code)
    return localize(code, ws)


def _empty_bucket(server) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**server.storage_options)
    keys = fs.find(server.bucket)
    if keys:
        fs.rm(keys)


def test_every_skip_says_why() -> None:
    for page in documents():
        for block in blocks(page):
            assert block.skip is None or len(block.skip) >= 10, f"{block.where}: say why the block is skipped"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_snippets_of_a_page_run(page: Path, tmp_path: Path, s3) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    prepare(ws)
    _empty_bucket(s3)
    runnable = [b for b in blocks(page, ("python",)) if b.skip is None]
    spec = {
        "prelude": PRELUDE.format(ws=ws),
        "blocks": [{"where": b.where, "code": _rewrite(b.code, ws, s3.endpoint_url)} for b in runnable],
    }
    (tmp_path / "blocks.json").write_text(json.dumps(spec), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TGB_PROGRESS": "0", "OMP_NUM_THREADS": "1",
           "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "8", "AWS_ENDPOINT_URL": s3.endpoint_url}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "docs" / "_run_blocks.py"), str(tmp_path / "blocks.json")],
                          cwd=ws, env=env, capture_output=True, text=True, timeout=840)
    ran = [line[4:] for line in proc.stdout.splitlines() if line.startswith("--- ")]
    assert proc.returncode == 0, f"failed in {ran[-1] if ran else 'the prelude'}:\n{proc.stderr[-4000:]}"
    assert ran[-1] == "all snippets ran"
