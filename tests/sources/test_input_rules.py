"""Issue 25 edges: what a source accepts is what ``write_dataset`` accepts, and no input hangs or crashes.

- a negative token id (``-100`` is the ignore label) is refused by every
  source and by ``write_dataset`` with one message (``transforms.tokens``);
- offsets that do not fit int64 (``[0, 2**63 + 5, 1000]`` as uint64 wraps
  around in a naive non-decreasing check) are refused;
- ``Parquet`` on a FIFO fails at once (``TokenFile``/``WebDataset`` did);
- a Parquet file of 0 rows is the "empty source" error;
- a ``Lance`` node made in the main process: forked DataLoader workers get a
  clear error (Lance is not fork-safe) instead of a segfault or a hang;
  spawned workers read it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.sources._corpus import _npy
from torch_tgb import sources
from torch_tgb.errors import SourceError

BAD_DOC = np.array([5, -100, 7], dtype=np.int32)
NEGATIVE = r"token ids must be >= 0, got -100"


def _token_file(root: Path) -> sources.TokenFile:
    np.save(root / "neg.npy", np.concatenate([np.arange(4, dtype=np.int32), BAD_DOC]))
    return sources.TokenFile(root / "neg.npy", offsets=[0, 4, 7])


def _webdataset(root: Path) -> sources.WebDataset:
    import io

    with tarfile.open(root / "neg.tar", "w") as tar:
        for key, doc in (("a", np.arange(4, dtype=np.int32)), ("b", BAD_DOC)):
            data = _npy(doc)
            info = tarfile.TarInfo(f"{key}.tokens.npy")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return sources.WebDataset(str(root / "neg.tar"))


def _table(docs: list[list[int]]):
    import pyarrow as pa

    return pa.table({"input_ids": pa.array(docs, pa.list_(pa.int32()))})


def _parquet(root: Path) -> sources.Parquet:
    import pyarrow.parquet as pq

    pq.write_table(_table([[0, 1, 2, 3], BAD_DOC.tolist()]), str(root / "neg.parquet"))
    return sources.Parquet(str(root / "neg.parquet"))


def _lance(root: Path) -> sources.Lance:
    import lance

    lance.write_dataset(_table([[0, 1, 2, 3], BAD_DOC.tolist()]), str(root / "neg.lance"))
    return sources.Lance(str(root / "neg.lance"), column="input_ids")


@pytest.mark.parametrize("make", [_token_file, _webdataset, _parquet, _lance], ids=lambda f: f.__name__[1:])
def test_every_source_refuses_negative_token_ids(tmp_path: Path, make) -> None:
    node = make(tmp_path)
    with pytest.raises(SourceError, match=NEGATIVE):
        list(node)  # before issue 25: yielded, and committed as token ids


def test_on_error_skip_drops_the_record_with_a_negative_id(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(_table([[0, 1], BAD_DOC.tolist(), [3]]), str(tmp_path / "neg.parquet"))
    node = sources.Parquet(str(tmp_path / "neg.parquet"), on_error="skip")
    assert [d["tokens"].tolist() for d in node] == [[0, 1], [3]] and node.stats().skipped == 1


def test_write_dataset_refuses_them_with_the_same_rule(tmp_path: Path) -> None:
    import torch_tgb as tgb

    with pytest.raises(ValueError, match=NEGATIVE):
        tgb.write_dataset(str(tmp_path / "ns"), [np.arange(4), BAD_DOC], layout=tgb.Layout(dp=1),
                          global_batch_size=1, seq_len=4, progress=False)


def test_offsets_beyond_int64_are_refused(tmp_path: Path) -> None:
    import torch_tgb as tgb

    np.save(tmp_path / "t.npy", np.arange(1000, dtype=np.uint16))
    wrapped = np.array([0, 2**63 + 5, 1000], dtype=np.uint64)  # its naive np.diff is "non-decreasing"
    with pytest.raises(SourceError, match=r"offsets hold 9223372036854775813 beyond the token count 1000"):
        sources.TokenFile(tmp_path / "t.npy", offsets=wrapped)
    with pytest.raises(ValueError, match=r"offsets hold 9223372036854775813 beyond the token count 1000"):
        tgb.write_dataset(str(tmp_path / "ns"), (np.arange(1000, dtype=np.uint16), wrapped),
                          layout=tgb.Layout(dp=1), global_batch_size=1, seq_len=8, progress=False)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["data.parquet", "data.arrow"])
def test_parquet_on_a_fifo_fails_at_once(tmp_path: Path, name: str) -> None:
    from tests.security._watchdog import within

    fifo = tmp_path / name
    os.mkfifo(fifo)

    def release() -> None:  # let a stuck open() return
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass

    outcome = within(30.0, lambda: sources.Parquet(str(fifo)), release)
    assert isinstance(outcome, SourceError) and f"{name}: not a regular file" in str(outcome)


def test_a_parquet_file_of_zero_rows_is_an_empty_source(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(_table([]), str(tmp_path / "empty.parquet"))
    with pytest.raises(SourceError, match="empty.parquet: empty source, nothing to read"):
        sources.Parquet(str(tmp_path / "empty.parquet"))


_LANCE_IN_WORKERS = textwrap.dedent('''
    import sys
    import torch
    from torch.utils.data import DataLoader, IterableDataset
    from torch_tgb import sources

    class Docs(IterableDataset):
        def __init__(self, node):
            self.node = node
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            for i, doc in enumerate(self.node):
                if info is None or i % info.num_workers == info.id:
                    yield doc["tokens"]

    if __name__ == "__main__":
        node = sources.Lance(sys.argv[1], column="input_ids")
        first = sorted(tuple(d["tokens"].tolist()) for d in node)    # the main process reads it first
        node.reset(None)
        loader = DataLoader(Docs(node), batch_size=None, num_workers=2, multiprocessing_context=sys.argv[2])
        try:
            got = sorted(tuple(t.tolist()) for t in loader)
        except Exception as e:
            print("error", e)
        else:
            assert got == first, (got, first)
            print("ok", len(got))
''')


@pytest.mark.timeout(600)
def test_a_lance_node_made_in_the_main_process_in_dataloader_workers(tmp_path: Path) -> None:
    """Forked workers get a clear error instead of a segfault or a hang; spawned ones read every document."""
    import lance

    docs = [list(range(k, k + 3 + k % 4)) for k in range(40)]
    lance.write_dataset(_table(docs), str(tmp_path / "c.lance"), max_rows_per_file=7)
    script = tmp_path / "workers.py"
    script.write_text(_LANCE_IN_WORKERS)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def run(context: str) -> str:
        proc = subprocess.run([sys.executable, str(script), str(tmp_path / "c.lance"), context], env=env,
                              capture_output=True, text=True, timeout=280)
        assert proc.returncode == 0, (context, proc.returncode, proc.stderr[-3000:])
        return proc.stdout

    for _ in range(2):  # the crash was timing-dependent
        out = run("fork")
        assert out.startswith("error") and "Lance is not fork-safe" in out and "multiprocessing_context='spawn'" in out
    assert run("spawn").startswith("ok 40")
