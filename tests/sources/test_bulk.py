"""The bulk path (``take_tokens``) a packer reads through: the same documents and states as ``next()``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import SourceError

BULK_KINDS = ["token_file", "token_file_grouped", "parquet", "parquet_inline", "lance", "lance_inline"]


def _per_doc(source: Any, state: dict | None = None) -> list[np.ndarray]:
    source.reset(state)
    return [d["tokens"].numpy().astype(np.int64) for d in source]


def _take_all(source: Any, sizes: list[int]) -> tuple[list[np.ndarray], list[tuple[int, dict]]]:
    """Documents by take_tokens with the sizes cycled; and (documents before, state) at every call."""
    source.reset(None)
    docs: list[np.ndarray] = []
    states = []
    k = 0
    while True:
        states.append((len(docs), source.state_dict()))
        got = source.take_tokens(sizes[k % len(sizes)])
        assert got is not None, "the bulk path applies here"
        flat, offsets = got
        assert offsets.dtype == np.int64 and offsets[0] == 0 and offsets[-1] == len(flat)
        if len(offsets) < 2:
            return docs, states
        docs += [flat[a:b].astype(np.int64) for a, b in zip(offsets[:-1], offsets[1:])]
        k += 1


@pytest.mark.parametrize("kind", BULK_KINDS)
@pytest.mark.parametrize("options", [{}, {"shard": (1, 3), "seed": 7}, {"epochs": 2, "seed": 3}])
def test_take_tokens_yields_what_next_yields(corpus: dict[str, Callable[..., Any]], kind: str, options: dict) -> None:
    expected = _per_doc(corpus[kind](**options))
    source = corpus[kind](**options)
    got, states = _take_all(source, [5, 1, 13])
    assert len(got) == len(expected)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert source.stats().records == len(expected)
    assert source.stats().tokens == sum(len(d) for d in expected)
    for before, state in states[:: max(1, len(states) // 5)]:  # a state saved between takes resumes exactly
        rest = _per_doc(corpus[kind](**options), state)
        assert len(rest) == len(expected) - before
        assert all(np.array_equal(a, b) for a, b in zip(rest, expected[before:]))


@settings(max_examples=15, deadline=None)
@given(plan=st.lists(st.tuples(st.booleans(), st.integers(1, 9)), min_size=1, max_size=30))
@pytest.mark.parametrize("kind", BULK_KINDS)
def test_takes_and_nexts_interleave(corpus: dict[str, Callable[..., Any]], kind: str, plan: list) -> None:
    """next() and take_tokens() mixed in any order read the stream once, in order."""
    expected = _per_doc(corpus[kind](shard=(0, 2), seed=1))
    source = corpus[kind](shard=(0, 2), seed=1)
    source.reset(None)
    got: list[np.ndarray] = []
    for bulk, n in plan:
        if bulk:
            taken = source.take_tokens(n)
            if taken is None:  # inside a window the per-record path is still reading: not applicable
                continue
            flat, offsets = taken
            got += [flat[a:b].astype(np.int64) for a, b in zip(offsets[:-1], offsets[1:])]
        else:
            for _ in range(n):
                doc = next(source, None)
                if doc is not None:
                    got.append(doc["tokens"].numpy().astype(np.int64))
    got += _per_doc_rest(source)
    assert len(got) == len(expected)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))


def _per_doc_rest(source: Any) -> list[np.ndarray]:
    return [d["tokens"].numpy().astype(np.int64) for d in source]


@pytest.mark.parametrize("kind", BULK_KINDS)
def test_no_bulk_path_where_it_does_not_apply(corpus: dict[str, Callable[..., Any]], kind: str) -> None:
    for options in ({"shuffle_buffer": 4}, {"on_error": "skip"}):
        source = corpus[kind](**options)
        source.reset(None)
        assert source.take_tokens(8) is None


def test_arrow_ipc_file_bulk(tmp_path: Any) -> None:
    pa = pytest.importorskip("pyarrow")
    from torch_tgb import sources

    rng = np.random.default_rng(1)
    rows = [rng.integers(0, 1000, size=int(rng.integers(0, 9))).tolist() for _ in range(23)]
    table = pa.table({"input_ids": pa.array(rows, pa.list_(pa.int64()))})
    path = tmp_path / "data-00000-of-00001.arrow"
    with pa.ipc.new_file(str(path), table.schema) as sink:
        for batch in table.to_batches(max_chunksize=6):
            sink.write_batch(batch)
    got, _ = _take_all(sources.Parquet(str(path)), [4])
    assert [d.tolist() for d in got] == [d.tolist() for d in _per_doc(sources.Parquet(str(path)))]
    assert sorted(map(tuple, (d.tolist() for d in got))) == sorted(map(tuple, rows))


@pytest.mark.parametrize("bad", ["null", "negative"])
def test_a_bad_record_falls_back_and_is_named(tmp_path: Any, bad: str) -> None:
    """take_tokens takes nothing from a record batch with a bad record; the per-record path then names it."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from torch_tgb import sources

    rows: list[Any] = [[1, 2], [3], [4, 5, 6], [7], [8, 9]]
    rows[3] = None if bad == "null" else [-1]
    pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int64()))}), str(tmp_path / "a.parquet"),
                   row_group_size=5)
    source = sources.Parquet(str(tmp_path / "a.parquet"))
    source.reset(None)
    state = source.state_dict()
    assert source.take_tokens(2) is None  # the record batch holds the bad row: nothing taken
    assert source.state_dict() == state
    assert [next(source)["tokens"].tolist() for _ in range(3)] == [[1, 2], [3], [4, 5, 6]]
    with pytest.raises(SourceError, match=r"row group 0 row 3"):
        next(source)


def test_token_file_reads_adjacent_documents_at_once(tmp_path: Any) -> None:
    """Consecutive documents are one read; documents in shuffled unit order are still right."""
    from torch_tgb import sources

    tokens = np.arange(1000, dtype=np.uint32)
    np.save(tmp_path / "t.npy", tokens)
    offsets = np.array([0, 10, 10, 250, 600, 1000], dtype=np.int64)
    for seed in (0, 1, 2):
        source = sources.TokenFile(str(tmp_path / "t.npy"), offsets=offsets, shard=(0, 1), seed=seed)
        got, _ = _take_all(source, [3])
        expected = _per_doc(sources.TokenFile(str(tmp_path / "t.npy"), offsets=offsets, shard=(0, 1), seed=seed))
        assert [g.tolist() for g in got] == [e.tolist() for e in expected]
        assert sorted(np.concatenate(got).tolist()) == list(range(1000))


@pytest.mark.parametrize("method", ["bfd", "concat", "none"])
@pytest.mark.parametrize("kind", BULK_KINDS)
def test_pack_packs_the_same_rows_either_way(corpus: dict[str, Callable[..., Any]], kind: str, method: str) -> None:
    """Pack over a source's bulk path and over its documents one by one: the same rows (provenance too), the same
    states."""
    from torchdata.nodes import BaseNode

    from torch_tgb.datapipes import Pack

    class PerDoc(BaseNode[Any]):  # the same source without take_tokens
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner
            self.source = inner  # where Pack finds the sources its rows' provenance names

        def reset(self, initial_state: dict | None = None) -> None:
            super().reset(initial_state)
            self.inner.reset(initial_state)

        def next(self) -> Any:
            return next(self.inner)

        def get_state(self) -> dict:
            return self.inner.state_dict()

    fast = Pack(corpus[kind](epochs=2), 16, window=7, method=method, token_dtype=torch.uint16)
    slow = Pack(PerDoc(corpus[kind](epochs=2)), 16, window=7, method=method, token_dtype=torch.uint16)
    fast.reset(None)
    slow.reset(None)
    n = 0
    for a, b in zip(fast, slow, strict=True):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
        n += 1
        if n % 5 == 0:
            assert fast.state_dict() == slow.state_dict()
    assert n > 0


def test_token_file_pieces_fall_back_per_document(tmp_path: Any) -> None:
    """Documents longer than piece_tokens go through next() (in pieces); the bulk path resumes after them."""
    from torch_tgb import sources

    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 30, size=60)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(0, 9, size=int(offsets[-1])).astype(np.uint16)

    def make() -> Any:
        return sources.TokenFile(tokens, offsets=offsets, piece_tokens=20, seed=2, epochs=2)

    expected = _per_doc(make())
    source = make()
    source.reset(None)
    got: list[np.ndarray] = []
    bulk = 0
    while True:
        taken = source.take_tokens(4)
        if taken is None:
            doc = next(source, None)
            if doc is None:
                break
            got.append(doc["tokens"].numpy().astype(np.int64))
            continue
        flat, offs = taken
        if len(offs) < 2:
            break
        bulk += len(offs) - 1
        got += [flat[a:b].astype(np.int64) for a, b in zip(offs[:-1], offs[1:])]
    assert [g.tolist() for g in got] == [e.tolist() for e in expected]
    assert bulk > len(expected) // 4  # the bulk path took over again after the long documents


@pytest.mark.parametrize("kind", ["token_file", "token_file_grouped"])
@pytest.mark.parametrize("options", [{}, {"epochs": 2, "seed": 3}])
@pytest.mark.parametrize("by", ["document", "block"])
def test_a_token_file_is_advised_ahead_of_its_bulk_reads_within_the_budget(
    corpus: dict[str, Callable[..., Any]], kind: str, options: dict, by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every byte the bulk path reads was advised (POSIX_FADV_WILLNEED) before its read, once per epoch.
    By document (a large file), the advised bytes not yet read stay within READ_AHEAD_BYTES plus one call's
    documents; by block (a file small next to the budget), each block is one request, once per epoch."""
    import os

    from torch_tgb.sources import token_file

    events: list[tuple[str, int, int]] = []  # ("advise" | "read", offset, length) in call order
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, offset, length, advice: events.append(("advise", offset, length)),
                        raising=False)
    monkeypatch.setattr(token_file, "READ_AHEAD_BYTES", 64)  # a small budget: the read-ahead runs in steps
    monkeypatch.setattr(token_file, "READ_AHEAD_BLOCKS_UP_TO", 1 << 40 if by == "block" else 0)
    monkeypatch.setattr(token_file, "READ_AHEAD_BLOCK", 24)  # blocks of 12 uint16 tokens: many of them
    real = os.preadv

    def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:  # every read of the token file
        n = real(fd, buffers, offset)
        events.append(("read", offset, n))
        return n

    monkeypatch.setattr(os, "preadv", preadv)
    source = corpus[kind](**options)
    docs, _ = _take_all(source, [3, 1, 5])
    assert docs and sum(1 for kind, _, _ in events if kind == "read") >= 2
    pending: dict[int, int] = {}  # byte -> times advised and not yet read
    largest = max(len(d) for d in docs) * source.token_dtype.itemsize * 5  # one call's documents at most
    for kind, offset, length in events:
        for byte in range(offset, offset + length):
            if kind == "advise":
                pending[byte] = pending.get(byte, 0) + 1
            else:
                assert pending.get(byte, 0) >= 1, f"byte {byte} read before it was advised"
                pending[byte] -= 1
        assert max(pending.values(), default=0) <= 1  # never advised twice before its read
        if by == "document":
            assert sum(pending.values()) <= 64 + 2 * largest
    assert not any(pending.values())  # each document (block) advised once per epoch, and all of it read
    advised = sum(1 for kind, _, _ in events if kind == "advise")
    if by == "block":  # one request per run of new blocks: at most one per block and epoch, fewer than documents
        blocks = -(-len(source._tokens()) * source.token_dtype.itemsize // 24)
        assert advised <= blocks * options.get("epochs", 1) and advised < len(docs)


@pytest.mark.parametrize("step", [1, 3, 7])
def test_short_reads_of_a_token_file_are_finished(tmp_path, monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """A pread may stop short (past 2 GiB on Linux, a signal): the runs still hold every byte, odd counts too."""
    import os

    from torch_tgb.sources._token_reader import TokenReader

    tokens = np.arange(1, 4001, dtype=np.uint16)
    np.save(tmp_path / "t.npy", tokens)
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, offset: real(fd, [buffers[0][:step]], offset))
    reader = TokenReader(np.load(tmp_path / "t.npy", mmap_mode="r"), "t.npy")
    starts, stops = np.array([0, 100, 3990]), np.array([10, 333, 4000])
    got = reader.read_runs(starts, stops)
    assert got.tolist() == np.concatenate([tokens[a:b] for a, b in zip(starts, stops)]).tolist()
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, offset: 0)  # the file ends early
    with pytest.raises(SourceError, match="short read"):
        reader.read_runs(starts, stops)
    reader.close()


@pytest.mark.parametrize("kind", ["token_file", "token_file_grouped"])
def test_a_failed_take_takes_nothing(
    corpus: dict[str, Callable[..., Any]], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that fails inside take_tokens (here the second span, past an epoch's end) leaves the position
    where it was: the retry reads the same documents, none skipped."""
    from torch_tgb.sources._token_reader import TokenReader

    expected = _per_doc(corpus[kind](epochs=2, seed=5))
    source = corpus[kind](epochs=2, seed=5)
    source.reset(None)
    first, _ = _take_all_of(source, len(expected) // 2 - 3)
    state = source.state_dict()
    real, calls = TokenReader.read_runs, {"n": 0}

    def read_runs(self: Any, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk gone")
        return real(self, starts, stops)

    monkeypatch.setattr(TokenReader, "read_runs", read_runs)
    with pytest.raises(OSError, match="disk gone"):
        source.take_tokens(10)  # the last documents of epoch 0, then the first of epoch 1
    assert calls["n"] == 2 and source.state_dict() == state
    monkeypatch.setattr(TokenReader, "read_runs", real)
    rest, _ = _take_all_of(source, len(expected))
    assert [d.tolist() for d in first + rest] == [d.tolist() for d in expected]


def _take_all_of(source: Any, n: int) -> tuple[list[np.ndarray], np.ndarray]:
    flat, offsets = source.take_tokens(n)
    return [flat[a:b].astype(np.int64) for a, b in zip(offsets[:-1], offsets[1:])], offsets
