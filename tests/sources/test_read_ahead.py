"""Decoding ahead (``sources._read_ahead``): a bounded, ordered hand-over that never outlives its source."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from torch_tgb.sources._read_ahead import ReadAhead, Tokens


class Owner:
    """Stands for the source: the read-ahead holds it weakly."""


def _batch(tag: int) -> Tokens:
    return np.full(3, tag, dtype=np.uint16), np.array([0, 1, 3], dtype=np.int64)


def _reader(batches_per_unit: int, *, fail_unit: int | None = None, log: list | None = None
            ) -> Callable[[Any, int, int], Iterator[Tokens]]:
    """Unit u's batches are tagged 100 * u + row, from ``row`` on; unit ``fail_unit`` cannot be opened."""

    def read(owner: Any, unit: int, row: int) -> Iterator[Tokens]:
        if unit == fail_unit:
            raise OSError(f"unit {unit} is unreadable")

        def batches() -> Iterator[Tokens]:
            for r in range(row, batches_per_unit):
                if log is not None:
                    log.append((unit, r))
                yield _batch(100 * unit + r)

        return batches()

    return read


def _tags(items: Iterator[Tokens]) -> list[int]:
    return [int(t[0][0]) for t in items if t is not None]


def _wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_units_come_in_order_from_the_first_row() -> None:
    owner = Owner()
    ahead = ReadAhead(owner, [((0, 0), 7), ((0, 1), 2), ((0, 2), 5)], 1, _reader(3), depth=2)
    try:
        assert ahead.open((0, 0), 0) is None  # the first unit is read from row 1, not 0
        assert _tags(ahead.open((0, 0), 1)) == [701, 702]
        assert ahead.open((0, 1), 1) is None  # later units from their start
        assert _tags(ahead.open((0, 1), 0)) == [200, 201, 202]
        assert _tags(ahead.open((0, 2), 0)) == [500, 501, 502]
        assert ahead.open((0, 2), 0) is None  # each unit once
    finally:
        ahead.close()


def test_a_unit_stepped_over_is_dropped() -> None:
    """The source moves past a unit it read partly (its length was known): the rest of it is skipped."""
    owner = Owner()
    ahead = ReadAhead(owner, [((0, 0), 1), ((0, 1), 2), ((1, 0), 3)], 0, _reader(4), depth=1)
    try:
        first = ahead.open((0, 0), 0)
        assert first is not None and _tags([next(first)]) == [100]
        assert _tags(ahead.open((1, 0), 0)) == [300, 301, 302, 303]  # unit (0, 1) skipped whole
        assert ahead.open((0, 1), 0) is None  # gone by
    finally:
        ahead.close()


def test_an_error_is_raised_where_the_reader_reaches_it() -> None:
    owner = Owner()
    ahead = ReadAhead(owner, [((0, 0), 0), ((0, 1), 1), ((0, 2), 2)], 0, _reader(2, fail_unit=1), depth=4)
    try:
        assert _tags(ahead.open((0, 0), 0)) == [0, 1]  # decoded before the failure, delivered whole
        failing = ahead.open((0, 1), 0)
        assert failing is not None
        with pytest.raises(OSError, match="unit 1 is unreadable"):
            next(failing)
    finally:
        ahead.close()


def test_a_failure_in_a_unit_stepped_over_is_not_raised() -> None:
    """The source left unit 0 before its end (it knew its length): an error past that point is not its error."""

    def read(owner: Any, unit: int, row: int) -> Iterator[Tokens]:
        def batches() -> Iterator[Tokens]:
            yield _batch(100 * unit)
            if unit == 0:
                raise OSError("past the rows the source reads")
            yield _batch(100 * unit + 1)

        return batches()

    owner = Owner()
    ahead = ReadAhead(owner, [((0, 0), 0), ((0, 1), 1)], 0, read, depth=4)
    try:
        first = ahead.open((0, 0), 0)
        assert first is not None and _tags([next(first)]) == [0]
        assert _tags(ahead.open((0, 1), 0)) == [100, 101]
    finally:
        ahead.close()


def test_a_unit_never_read_raises_instead_of_waiting() -> None:
    """After a bad record the thread ends: asking it for a later unit is an error, not a wait forever."""

    def read(owner: Any, unit: int, row: int) -> Iterator[Tokens]:
        return iter([None])

    owner = Owner()
    ahead = ReadAhead(owner, [((0, 0), 0), ((0, 1), 1)], 0, read, depth=4)
    try:
        later = ahead.open((0, 1), 0)
        assert later is not None
        with pytest.raises(RuntimeError, match=r"ended before unit \(0, 1\)"):
            next(later)
    finally:
        ahead.close()


def test_a_bad_record_ends_the_read_ahead() -> None:
    """A batch with a bad record (None) is handed over and nothing after it is read: the source falls back."""
    owner = Owner()
    log: list = []

    def read(owner: Any, unit: int, row: int) -> Iterator[Tokens]:
        def batches() -> Iterator[Tokens]:
            for r in range(3):
                log.append((unit, r))
                yield None if (unit, r) == (0, 1) else _batch(r)

        return batches()

    ahead = ReadAhead(owner, [((0, 0), 0), ((0, 1), 1)], 0, read, depth=8)
    try:
        items = ahead.open((0, 0), 0)
        assert items is not None
        assert _tags([next(items)]) == [0]
        assert next(items) is None
        _wait_until(lambda: not ahead._thread.is_alive())
        assert log == [(0, 0), (0, 1)]
    finally:
        ahead.close()


def test_the_thread_reads_at_most_depth_batches_ahead() -> None:
    owner = Owner()
    log: list = []
    depth = 2
    ahead = ReadAhead(owner, [((0, u), u) for u in range(5)], 0, _reader(4, log=log), depth=depth)
    try:
        _wait_until(lambda: len(log) >= depth + 1)  # depth queued, one more made and waiting for room
        time.sleep(0.2)
        assert len(log) == depth + 1
        items = ahead.open((0, 0), 0)
        assert items is not None
        next(items)
        _wait_until(lambda: len(log) >= depth + 2)
        time.sleep(0.2)
        assert len(log) == depth + 2
    finally:
        ahead.close()


def test_close_stops_a_thread_waiting_for_room() -> None:
    owner = Owner()
    log: list = []
    ahead = ReadAhead(owner, [((0, u), u) for u in range(50)], 0, _reader(10, log=log), depth=1)
    _wait_until(lambda: len(log) >= 2)
    ahead.close()
    assert not ahead._thread.is_alive()
    read = len(log)
    time.sleep(0.1)
    assert len(log) == read


def test_a_dropped_source_stops_its_thread() -> None:
    """A source dropped in the middle of a read does not leave its thread (and its batches) behind."""
    owner = Owner()
    ahead = ReadAhead(owner, [((0, u), u) for u in range(50)], 0, _reader(10), depth=1)
    thread = ahead._thread
    del owner
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="depth must be >= 1"):
        ReadAhead(Owner(), [], 0, _reader(1), depth=0)


# --- in the sources -----------------------------------------------------------------------------------


def _thread_of(source: Any) -> threading.Thread | None:
    return None if source._ahead is None else source._ahead._thread


def _take(source: Any, n: int) -> list[list[int]]:
    taken = source.take_tokens(n)
    assert taken is not None
    flat, offsets = taken
    return [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


@pytest.mark.parametrize("kind", ["parquet", "lance"])
def test_a_source_stops_its_thread_before_reading_itself(corpus: dict[str, Callable[..., Any]], kind: str) -> None:
    """The per-record path, a restore and a reset stop the read-ahead first; the documents stay the same."""
    expected = [d["tokens"].tolist() for d in corpus[f"{kind}_inline"](seed=4)]
    source = corpus[kind](seed=4)
    source.reset(None)
    got = _take(source, 3)
    thread = _thread_of(source)
    assert thread is not None and thread.is_alive()
    state = source.state_dict()
    got.append(next(source)["tokens"].tolist())  # the per-record path: the thread is stopped first
    assert _thread_of(source) is None and not thread.is_alive()
    got += _take(source, 2)  # a new read-ahead from where the per-record path left off
    assert got == expected[:6]
    thread = _thread_of(source)
    assert thread is not None
    source.reset(state)
    assert _thread_of(source) is None and not thread.is_alive()
    assert _take(source, 1) == [expected[3]]
    thread = _thread_of(source)
    assert thread is not None
    source.reset(None)
    assert _thread_of(source) is None and not thread.is_alive()


@pytest.mark.parametrize("decode_ahead", [0, 2])
def test_an_unreadable_unit_fails_after_the_units_before_it(
    corpus: dict[str, Callable[..., Any]], decode_ahead: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit that cannot be read raises when the bulk path reaches it, not when the thread meets it; a call
    that fails takes nothing (the position stays), so a retry once the unit reads again loses no document."""
    from torch_tgb.sources.parquet import Parquet

    expected = [d["tokens"].tolist() for d in corpus["parquet_inline"]()]
    source = corpus["parquet"](decode_ahead=decode_ahead)
    order = [int(u) for u in source._assignment()]
    broken = {order[2]}
    real = Parquet._batches

    def batches(self: Any, unit: int, start: int, batch_size: int) -> Any:
        if unit in broken:
            raise OSError(f"unit {unit}: disk gone")
        return real(self, unit, start, batch_size)

    monkeypatch.setattr(Parquet, "_batches", batches)
    source.reset(None)
    docs = sum(source._unit_length(u) for u in order[:2])
    got = _take(source, docs - 1)  # the two units before it, but for one document
    state = source.state_dict()
    with pytest.raises(OSError, match="disk gone"):
        source.take_tokens(3)  # the last document of unit 1, then unit 2
    assert source.state_dict() == state
    with pytest.raises(OSError, match="disk gone"):
        source.take_tokens(3)  # the same again: nothing was skipped
    broken.clear()
    got += _take(source, len(expected))
    assert got == expected
    thread = _thread_of(source)
    source.reset(None)
    assert thread is None or not thread.is_alive()


def test_decode_ahead_must_not_be_negative(corpus: dict[str, Callable[..., Any]]) -> None:
    with pytest.raises(ValueError, match="decode_ahead must be >= 0"):
        corpus["parquet"](decode_ahead=-1)


def test_a_closed_read_ahead_raises_instead_of_waiting() -> None:
    """A reader still holding a unit's batches when the read-ahead is closed gets an error, not a wait forever."""
    owner = Owner()
    ahead = ReadAhead(owner, [((0, 0), 0)], 0, _reader(8), depth=1)
    items = ahead.open((0, 0), 0)
    assert items is not None
    next(items)
    ahead.close()
    with pytest.raises(RuntimeError, match=r"ended before unit \(0, 0\)"):
        list(items)


@pytest.mark.timeout(60)
def test_a_failed_per_record_read_leaves_no_stale_bulk_reader(
    corpus: dict[str, Callable[..., Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-record path stops the read-ahead and drops the bulk reader fed by it: a take after a failed
    per-record read opens the unit again (Lance: unit lengths unknown, so a read-through unit is still open)."""
    from torch_tgb.sources.lance import Lance

    expected = [d["tokens"].tolist() for d in corpus["lance_inline"](seed=6)]
    source = corpus["lance"](seed=6)
    source.reset(None)
    first = source._dataset().get_fragment(source._fragment_ids[int(source._assignment()[0])]).count_rows()
    got = _take(source, first)  # the first unit, to its last row: its end not read yet
    real = Lance._records

    def records(self: Any, unit: int, start: int) -> Any:
        raise OSError("per-record read failed")

    monkeypatch.setattr(Lance, "_records", records)
    with pytest.raises(Exception, match="per-record read failed"):
        next(source)
    monkeypatch.setattr(Lance, "_records", real)
    got += _take(source, len(expected))
    assert got == expected
