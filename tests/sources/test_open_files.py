"""A Parquet corpus of many files: read whole, in the same order, with few descriptors; its footers read in parallel.

A Hugging Face dataset is often thousands of Parquet shards; a source that
kept every file open ran out of descriptors past ``ulimit -n`` (1024 here)
and called the file it failed on "not a Parquet file"; and it read the
footers one after the other, a round trip each on an object store.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.sources._corpus import counts, make_docs, write_parquet
from torch_tgb import sources
from torch_tgb.errors import SourceError

pytest.importorskip("pyarrow")
parquet = pytest.importorskip("torch_tgb.sources.parquet")

FILES = 12


def _open_under(root: Path) -> int:
    """Descriptors of this process open on files under ``root``."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(root))
        except OSError:  # closed meanwhile
            pass
    return n


class _Watch:
    """The most descriptors open under ``root`` at once, sampled on a thread while reading."""

    def __init__(self, root: Path) -> None:
        self.root, self.most, self._stop = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, _open_under(self.root))
            self._stop.wait(0.001)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.most = max(self.most, _open_under(self.root))


@pytest.fixture()
def many_files(tmp_path: Path) -> tuple[Path, list[np.ndarray]]:
    docs = make_docs(120, seed=3)
    write_parquet(tmp_path, docs, files=FILES, row_group=3)
    return tmp_path, docs


def _bulk(source: sources.Parquet) -> list[tuple[int, ...]]:
    out = []
    while True:
        got = source.take_tokens(7)
        assert got is not None, "the bulk path applies here"
        flat, offsets = got
        if len(offsets) < 2:
            return out
        out += [tuple(int(x) for x in flat[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
@pytest.mark.parametrize("path", ["next", "bulk"])
def test_more_files_than_may_stay_open_read_every_document_in_the_same_order(many_files, monkeypatch, path):
    root, docs = many_files
    def run(limit: int) -> tuple[list[tuple[int, ...]], dict, int]:
        monkeypatch.setattr(parquet, "MAX_OPEN_FILES", limit)
        with _Watch(root) as watch:
            source = sources.Parquet(str(root), seed=7)
            got = ([tuple(int(x) for x in d["tokens"]) for d in source] if path == "next" else _bulk(source))
            state = source.state_dict()
            most = _open_under(root)  # before the source (and the files it keeps) goes
        del source
        gc.collect()
        assert _open_under(root) == 0  # a source dropped closes its files
        return got, state, max(most, watch.most)

    read = {limit: run(limit) for limit in (1000, 2)}
    assert counts(np.array(d) for d in read[2][0]) == counts(docs)  # every document once
    assert read[2][0] == read[1000][0] and read[2][1] == read[1000][1]  # the limit changes no order and no state
    assert read[1000][2] >= FILES  # the scan opened every file: without the limit they stay open
    assert read[2][2] <= 2 + 1  # the files kept, and at most one more: the unit being read keeps its own


def test_a_file_that_cannot_be_opened_is_not_called_a_bad_file(tmp_path, monkeypatch):
    write_parquet(tmp_path, make_docs(10), files=1)

    def refuse(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(parquet.pq, "ParquetFile", refuse)
    with pytest.raises(SourceError, match=r"part-000.parquet: cannot read the Parquet file: .*Too many open files"):
        sources.Parquet(str(tmp_path))


def _slow_fs() -> Any:
    """A memory filesystem (``tgbslowmem://``) whose every open waits 50 ms, an object store's round trip; it counts
    the opens, and the most at once."""
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    class SlowFS(MemoryFileSystem):
        protocol = "tgbslowmem"
        store: dict = {}  # noqa: RUF012 - MemoryFileSystem keeps its files on the class: these are this test's
        pseudo_dirs: list = [""]  # noqa: RUF012
        guard = threading.Lock()
        active = most = opened = 0

        @classmethod
        def _strip_protocol(cls, path):
            return MemoryFileSystem._strip_protocol(path.removeprefix(f"{cls.protocol}://"))

        def _open(self, path, mode="rb", **kwargs):
            cls = type(self)
            with cls.guard:
                cls.active += 1
                cls.opened += 1
                cls.most = max(cls.most, cls.active)
            try:
                time.sleep(0.05)
                return super()._open(path, mode, **kwargs)
            finally:
                with cls.guard:
                    cls.active -= 1

    fsspec.register_implementation(SlowFS.protocol, SlowFS, clobber=True)
    return SlowFS


def _upload(fs: Any, local: list[str], folder: str) -> list[str]:
    urls = []
    for path in local:
        with fs.open(f"/{folder}/{Path(path).name}", "wb") as f:
            f.write(Path(path).read_bytes())
        urls.append(f"{fs.protocol}:///{folder}/{Path(path).name}")
    return urls


def test_the_footers_of_remote_files_are_read_several_at_a_time(tmp_path):
    """The footers' opens overlap on a slow filesystem, and the source made from it reads the same documents as from
    local copies of the files."""
    slow = _slow_fs()
    docs = make_docs(60, seed=5)
    local = write_parquet(tmp_path, docs, files=FILES, row_group=3)
    urls = _upload(slow(), local, "corpus")
    slow.most = 0
    remote = sources.Parquet(urls, seed=1)
    assert slow.most > 1, "the footers were read one at a time"
    here = sources.Parquet(local, seed=1)
    assert remote.num_units == here.num_units
    assert [tuple(int(x) for x in d["tokens"]) for d in remote] == [tuple(int(x) for x in d["tokens"]) for d in here]
    assert counts(d["tokens"] for d in sources.Parquet(urls)) == counts(docs)


def test_a_refused_file_stops_the_scan_of_the_files_after_it(tmp_path):
    """The first file has no ``input_ids`` column: the source is refused as soon as its footer is read, and the
    footers after it are not read on in the background while the error is handled."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    slow = _slow_fs()
    pq.write_table(pa.table({"text": ["no token column"]}), str(tmp_path / "a-000.parquet"))
    (tmp_path / "good").mkdir()
    local = [str(tmp_path / "a-000.parquet"), *write_parquet(tmp_path / "good", make_docs(60), files=48, row_group=2)]
    urls = _upload(slow(), local, "refused")
    slow.opened = 0
    with pytest.raises(SourceError, match="a-000.parquet"):
        sources.Parquet(urls)
    time.sleep(0.4)  # 48 footers at 16 at a time take 0.15 s: a scan left running would have opened them all
    assert slow.opened < len(urls), f"{slow.opened} of {len(urls)} files opened after the first was refused"


def test_a_glob_pattern_names_the_files_it_matches_in_sorted_order(tmp_path):
    paths = write_parquet(tmp_path, make_docs(30), files=4)  # part-000.parquet .. part-003.parquet
    assert sources.Parquet(str(tmp_path / "part-*.parquet")).paths == paths
    assert sources.Parquet([str(tmp_path / "part-00[23].parquet"), paths[0]]).paths == [*paths[2:], paths[0]]
    with pytest.raises(SourceError, match=r"nope-\*\.parquet: no Parquet or Arrow file matches the pattern"):
        sources.Parquet(str(tmp_path / "nope-*.parquet"))
