"""Decoding ahead: the record batches an Arrow source reads next, decoded on a thread of their own.

The bulk path of a Parquet or Lance source (``ArrowSource.take_tokens``)
spends most of its time in the format's decoder, which releases the GIL.
:class:`ReadAhead` walks the units the source will read next, in its order,
on one background thread and hands each record batch's token arrays over
through a bounded queue, so decoding the next batch overlaps the packing and
writing of this one. It only reads ahead: the source's position, state and
errors stay the source's. An item is exactly what the source would have
made in its own thread (a batch's ``(flat tokens, offsets)``, or None for a
bad record), and an exception is raised where the source would have met it.

While a ``ReadAhead`` runs, its thread is the only one reading the source's
files: the source stops it (:meth:`ReadAhead.close`) before reading anything
itself.
"""

from __future__ import annotations

import queue
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from torch_tgb._queues import POLL_S, put_unless

__all__ = ["ReadAhead", "Tokens"]

#: one record batch's tokens, as ``token_arrays`` makes them: (flat tokens, int64 offsets); None: a bad record
Tokens = tuple[np.ndarray, np.ndarray] | None
Key = tuple[int, int]  # (epoch, position in the epoch's order): which unit, as the source counts

_UNIT_END = object()  # after a unit's last batch
_DONE = object()  # the thread's last item


class _Failed:
    """A unit that could not be read: raised to the reader when it reaches that unit."""

    def __init__(self, error: BaseException) -> None:
        self.error = error



class ReadAhead:
    """Token arrays of ``units`` (``(key, unit)`` in reading order) of ``owner``, decoded on a thread.

    ``read(owner, unit, row)`` opens a unit from ``row`` and returns its
    batches' token arrays as an iterator that does not hold ``owner`` (the
    thread keeps the source only weakly: a source dropped mid-read stops it).
    The first unit is read from row ``first_row``, the others from their
    start. ``depth`` bounds the batches decoded and not yet taken.
    """

    def __init__(
        self, owner: object, units: Sequence[tuple[Key, int]], first_row: int,
        read: Callable[[Any, int, int], Iterator[Tokens]], *, depth: int,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._owner = weakref.ref(owner)
        self._keys = [key for key, _ in units]
        self._first_row = first_row
        self._queue: queue.Queue[tuple[Key | None, Any]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._opened = -1  # index of the unit last handed out
        self._thread = threading.Thread(target=self._run, args=(list(units), read), name="tgb-read-ahead",
                                        daemon=True)
        self._thread.start()

    def open(self, key: Key, row: int) -> Iterator[Tokens] | None:
        """The batches of unit ``key`` from ``row``, if this read-ahead is reading them; else None.

        Units skipped over (the source stepped past them without reading them
        through) are dropped. After None the caller closes this read-ahead.
        """
        try:
            at = self._keys.index(key, self._opened + 1)
        except ValueError:
            return None
        if row != (self._first_row if at == 0 else 0):
            return None
        self._opened = at
        return self._batches(key)

    def _batches(self, key: Key) -> Iterator[Tokens]:
        while True:
            item_key, item = self._queue.get()
            if item is _DONE:
                raise RuntimeError(f"the read-ahead thread ended before unit {key}")  # a bug, not a wait forever
            if item_key != key:  # a unit before this one, stepped over: not needed
                continue
            if item is _UNIT_END:
                return
            if isinstance(item, _Failed):  # raised where the source would have met it
                raise item.error
            yield item

    def _run(self, units: list[tuple[Key, int]], read: Callable[[Any, int, int], Iterator[Tokens]]) -> None:
        try:
            for i, (key, unit) in enumerate(units):
                try:
                    batches = self._open(read, unit, self._first_row if i == 0 else 0)
                    if batches is None:  # the source is gone
                        return
                    for tokens in batches:
                        if not self._put((key, tokens)) or tokens is None:  # a bad record: the source falls back
                            return
                    end: Any = _UNIT_END
                except BaseException as e:  # the next units are read on: the source may never reach this one
                    traceback.clear_frames(e.__traceback__)  # the frames' locals (the source) are not kept alive
                    end = _Failed(e)
                if not self._put((key, end)):
                    return
        finally:
            self._put((None, _DONE))

    def _open(self, read: Callable[[Any, int, int], Iterator[Tokens]], unit: int, row: int) -> Iterator[Tokens] | None:
        """``read`` of the source, held only while the unit is opened; None once it is gone."""
        owner = self._owner()
        return None if owner is None else read(owner, unit, row)

    def _put(self, item: tuple[Key | None, Any]) -> bool:
        """Queue ``item``; False once stopped or once the source is gone."""
        return put_unless(self._queue, item, lambda: self._stop.is_set() or self._owner() is None)

    def close(self) -> None:
        """Stop the thread and wait for it (at most the batch it is decoding); what it read is dropped.

        A reader still iterating a unit of it then raises instead of waiting for
        batches that will not come.
        """
        self._stop.set()
        while self._thread.is_alive():
            self._drain()  # room for a put the thread is blocked in, which then sees the stop
            self._thread.join(timeout=POLL_S)
        self._drain()  # what that last put queued
        self._queue.put_nowait((None, _DONE))  # the thread is gone: the queue has room and nobody else puts

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
