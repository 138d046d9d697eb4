"""The unit walker every source shares: sharding, window shuffle, resume, error policy.

A source is cut into units (documents or chunks of a token file, tar shards,
Lance fragments, Parquet row groups). A shard reads the units that
``transforms.partition.shard_assignment`` gives it for the epoch, in that
order; inside a unit it reads records in windows of ``shuffle_buffer``
records, each window emitted in ``window_permutation`` order (or as read, when
``shuffle_buffer`` is 0).

State (JSON): ``epoch``, ``unit`` (position in the shard's unit list),
``record`` (index in the unit of the current window's first record),
``emitted`` (documents of that window already yielded), ``num_units`` (checked
on restore: a source that changed since is an error, not a silent shift) and
the stats counters. Restoring re-opens the one unit, skips to ``record``,
re-reads and re-permutes the window and drops ``emitted`` documents: nothing
before the unit is read again and no record is kept in the state.

Provenance: every document carries its id under :data:`DOC_PROVENANCE`, the
tuple ``(unit key, record, start)`` of ``transforms.provenance`` (the unit key
holds the source's id and the unit's index in :meth:`UnitSource.provenance_info`).
A subclass names its units for provenance (``_provenance_units``: a file, a
shard) and maps its walker's records to them (``_record_id``) where the two
differ (a Parquet row group is a range of its file's rows). ``name=`` names
the source (``SOURCE`` of ``SOURCE:UNIT:RECORD``); a ``Mix`` names an unnamed
source by its key.

A subclass implements ``_records(unit, start)``: an iterator over the records
of ``unit`` from index ``start`` on, each a document dict or a
:class:`SourceError` for a record that could not be decoded (so that the
walker, not the format, applies ``on_error``). Errors while opening or
reading a unit itself (not a tar, truncated file) always raise.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any, TypedDict

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb._lazy import require
from torch_tgb._on_error import OnError, check_on_error
from torch_tgb.errors import SourceError, TGBError
from torch_tgb.sources._work import SourceWork, epoch_records, measure_work
from torch_tgb.transforms.partition import shard_assignment, window_permutation
from torch_tgb.transforms.provenance import DOC_PROVENANCE, SourceInfo, unit_key

__all__ = [
    "DOC_PROVENANCE",
    "Document",
    "ReadOptions",
    "SourceStats",
    "UnitSource",
    "require",
]

Document = dict[str, Any]


class ReadOptions(TypedDict, total=False):
    """The keywords every source takes (``**options``), with their defaults."""

    shard: tuple[int, int]  # (index, count); (0, 1)
    seed: int  # of the unit permutation and the window shuffle; 0
    epoch: int  # first epoch; 0
    epochs: int | None  # epochs to read, None = forever; 1
    shuffle_buffer: int  # records per shuffle window, 0 = read order; 0
    on_error: OnError  # "raise" | "skip" (counted) for corrupt records; "raise"
    name: str | None  # the source's name in provenance (SOURCE of SOURCE:UNIT:RECORD); None: from its files


@dataclasses.dataclass(frozen=True)
class SourceStats:
    """Counters of a source since it started (restored with its state)."""

    records: int = 0  # documents yielded
    tokens: int = 0  # tokens in them
    skipped: int = 0  # corrupt records skipped under on_error="skip"


class UnitSource(BaseNode[Document]):
    """Base of the sources: yields documents ``{"tokens": 1-D int tensor, ...}`` of its shard."""

    #: what :meth:`work` calls a record and a unit of this source
    RECORD_NAME = "record"
    UNIT_NAME = "unit"
    #: the reason a skipped record is counted under in a produce report (``stats().skipped``)
    SKIP_REASON = "bad_record"

    EPOCH_KEY = "epoch"
    UNIT_KEY = "unit"
    RECORD_KEY = "record"
    EMITTED_KEY = "emitted"
    NUM_UNITS_KEY = "num_units"
    STATS_KEY = "stats"

    def __init__(
        self,
        *,
        shard: tuple[int, int] = (0, 1),
        seed: int = 0,
        epoch: int = 0,
        epochs: int | None = 1,
        shuffle_buffer: int = 0,
        on_error: OnError = "raise",
        name: str | None = None,
    ) -> None:
        super().__init__()
        index, count = shard
        if not 0 <= index < count:
            raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard=}")
        if seed < 0 or epoch < 0 or shuffle_buffer < 0 or (epochs is not None and epochs < 1):
            raise ValueError(f"need seed, epoch, shuffle_buffer >= 0 and epochs >= 1, got {seed=} {epoch=} "
                             f"{shuffle_buffer=} {epochs=}")
        check_on_error(on_error, where=type(self).__name__)
        self.shard = (index, count)
        self.seed = seed
        self.first_epoch = epoch
        self.epochs = epochs
        self.shuffle_buffer = shuffle_buffer
        self.on_error = on_error
        if name is not None:
            SourceInfo(name, "check", ())  # refuse a bad name now
        self._name = name
        self._named_by: str | None = None  # a Mix's key, used when no name was given
        self._info: SourceInfo | None = None
        self._unit_keys: dict[int, int] = {}
        self._num_units = 0
        self._pid = os.getpid()
        self._inherited: list[Any] = []
        self._work_cache: tuple[int, int | None, str] | None = None  # (epoch, its total, kind): see work()
        self._start(epoch)

    # --- what a subclass provides -------------------------------------------------

    def _records(self, unit: int, start: int) -> Iterator[Document | SourceError]:
        """Records of ``unit`` from index ``start``: documents, or errors for corrupt records."""
        raise NotImplementedError

    def _unit_name(self, unit: int) -> str:
        """The unit in messages: the file, and the part of it."""
        raise NotImplementedError

    def _unit_length(self, unit: int) -> int | None:
        """Records in ``unit`` when known without reading it (saves re-opening a finished unit)."""
        return None

    def _unit_records(self, unit: int) -> int | None:
        """Records in ``unit`` for :meth:`work`: ``_unit_length``, or a count a subclass may take at some cost."""
        return self._unit_length(unit)

    def _epoch_work(self) -> tuple[int | None, str]:
        """(this shard's work in one epoch, its kind): records where every unit's count is known, else units.

        A subclass may measure in tokens instead (``(tokens, "token")``).
        """
        return epoch_records(self)

    def work(self) -> SourceWork:
        """How far this source has read its shard, in its best-known unit (tokens, records or units)."""
        return measure_work(self)
    def _provenance_units(self) -> list[str]:
        """The names of the units records belong to in provenance (default: the walker's units)."""
        return [self._unit_name(u) for u in range(self._num_units)]

    def _record_id(self, unit: int, index: int) -> tuple[int, int, int]:
        """``(provenance unit, record, start)`` of record ``index`` of walker unit ``unit`` (default: the same)."""
        return unit, index, 0

    def _default_name(self) -> str:
        """The source's name when none was given: its file's (or first unit's) base name."""
        first = self._unit_name(0) if self._num_units else type(self).__name__
        base = os.path.basename(first.split(" ", 1)[0].rstrip("/")) or type(self).__name__
        return "".join("_" if c == ":" or c.isspace() else c for c in base)

    # --- provenance ------------------------------------------------------------------

    @property
    def provenance_name(self) -> str:
        return self._name or self._named_by or self._default_name()

    def name_for_provenance(self, name: str) -> None:
        """Name this source ``name`` unless it was given one (what ``Mix`` does with its keys)."""
        if self._name is None and self._named_by != name:
            SourceInfo(name, "check", ())
            self._named_by = name
            self._info = None
            self._unit_keys = {}

    def provenance_info(self) -> SourceInfo:
        """This source's name, kind and units, as provenance records name them (computed once)."""
        if self._info is None:
            self._info = SourceInfo(self.provenance_name, type(self).__name__, tuple(self._provenance_units()))
        return self._info

    def provenance_sources(self) -> list[SourceInfo]:
        """The sources whose records this node's documents name (itself)."""
        return [self.provenance_info()]

    def _unit_key(self, unit: int) -> int:
        key = self._unit_keys.get(unit)
        if key is None:
            key = self._unit_keys[unit] = unit_key(self.provenance_info().source_id, unit)
        return key

    def _document_id(self, unit: int, index: int) -> tuple[int, int, int]:
        prov_unit, record, start = self._record_id(unit, index)
        return self._unit_key(prov_unit), record, start

    def _set_num_units(self, num_units: int, where: str) -> None:
        if num_units == 0:
            raise SourceError(f"{where}: empty source, nothing to read")
        self._num_units = num_units

    # --- the walker -------------------------------------------------------------------

    @property
    def num_units(self) -> int:
        return self._num_units

    def stats(self) -> SourceStats:
        return SourceStats(self._records_out, self._tokens_out, self._skipped)

    def _start(self, epoch: int) -> None:
        self._epoch, self._pos, self._window_start, self._emitted = epoch, 0, 0, 0
        self._records_out = self._tokens_out = self._skipped = 0
        self._clear_window()

    def _clear_window(self) -> None:
        self._order: np.ndarray | None = None
        self._it: Iterator[Document | SourceError] | None = None
        self._window: list[Document] = []
        self._window_raw = 0
        self._unit_done = False
        self._loaded = False
        self._skipped_before_window = self._skipped

    def _after_fork(self) -> None:
        """In a forked child (a DataLoader worker), set the parent's open files and readers aside.

        They belong to the parent (a file position, a tar stream, a reader's
        thread pool): the child keeps them referenced, never touches or
        closes them, and reopens what it reads, as a copy sent to a spawned
        worker does. A source whose library cannot survive a fork at all
        (``Lance``) overrides this to refuse with a clear error instead.
        """
        pid = os.getpid()
        if pid == self._pid:
            return
        self._pid = pid
        handles = [k for k in self.__dict__ if k.endswith("_handles")]
        self._inherited.append((self._it, [self.__dict__[k] for k in handles]))
        self._it = None
        for k in handles:
            self.__dict__[k] = {}

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._after_fork()
        self._close_unit()
        if initial_state is None:
            self._start(self.first_epoch)
            return
        if int(initial_state[self.NUM_UNITS_KEY]) != self._num_units:
            raise SourceError(
                f"{self._unit_name(0)}: the state was saved over {initial_state[self.NUM_UNITS_KEY]} units, "
                f"the source now has {self._num_units}; it changed since"
            )
        stats = initial_state[self.STATS_KEY]
        self._epoch = int(initial_state[self.EPOCH_KEY])
        self._pos = int(initial_state[self.UNIT_KEY])
        self._window_start = int(initial_state[self.RECORD_KEY])
        self._emitted = int(initial_state[self.EMITTED_KEY])
        self._records_out, self._tokens_out = int(stats["records"]), int(stats["tokens"])
        self._skipped = int(stats["skipped"])
        self._clear_window()

    def get_state(self) -> dict[str, Any]:
        pos, record, emitted, skipped = self._pos, self._window_start, self._emitted, self._skipped_before_window
        if self._loaded and self._emitted >= len(self._window):  # window used up: point past it
            pos, record = (pos + 1, 0) if self._unit_done else (pos, record + self._window_raw)
            emitted, skipped = 0, self._skipped
        elif not self._loaded:
            skipped = self._skipped
        return {
            self.EPOCH_KEY: self._epoch,
            self.UNIT_KEY: pos,
            self.RECORD_KEY: record,
            self.EMITTED_KEY: emitted,
            self.NUM_UNITS_KEY: self._num_units,
            self.STATS_KEY: {"records": self._records_out, "tokens": self._tokens_out, "skipped": skipped},
        }

    def next(self) -> Document:
        while True:
            if not self._loaded:
                if not self._ensure_unit():
                    raise StopIteration
                self._fill()
            if self._emitted < len(self._window):
                doc = self._window[self._emitted]
                self._emitted += 1
                self._records_out += 1
                self._tokens_out += int(doc["tokens"].numel())
                return doc
            self._next_window()

    def _assignment(self) -> np.ndarray:
        if self._order is None:
            index, count = self.shard
            self._order = shard_assignment(
                self._num_units, shard_index=index, shard_count=count, seed=self.seed, epoch=self._epoch
            )
        return self._order

    def _ensure_unit(self) -> bool:
        """Move to the next epoch when this one is done; False at the end of the last one."""
        while self._pos >= len(self._assignment()):
            last = self.epochs is not None and self._epoch + 1 >= self.first_epoch + self.epochs
            if last or len(self._assignment()) == 0:  # an empty shard stays empty every epoch
                return False
            self._epoch, self._pos, self._window_start, self._order = self._epoch + 1, 0, 0, None
        return True

    def _next_window(self) -> None:
        if self._unit_done:
            self._pos, self._window_start = self._pos + 1, 0
        else:
            self._window_start += self._window_raw
        self._emitted = 0
        self._window, self._window_raw, self._loaded = [], 0, False

    def _fill(self) -> None:
        """Read the next window of records of the current unit (applying on_error) and order it."""
        self._after_fork()
        unit = int(self._assignment()[self._pos])
        length = self._unit_length(unit)
        size = max(self.shuffle_buffer, 1)
        if length is not None:
            size = max(0, min(size, length - self._window_start))
        self._skipped_before_window = self._skipped
        docs: list[Document] = []
        raw, done = 0, False
        try:
            if self._it is None:
                self._it = self._records(unit, self._window_start)
            while raw < size:
                item = next(self._it, None)
                if item is None:
                    done = True
                    break
                raw += 1
                if isinstance(item, SourceError):
                    if self.on_error == "raise":
                        raise item
                    self._skipped += 1
                else:
                    item[DOC_PROVENANCE] = self._document_id(unit, self._window_start + raw - 1)
                    docs.append(item)
        except TGBError:
            raise
        except Exception as e:  # a unit that cannot be opened or read through is never skipped
            raise SourceError(f"{self._unit_name(unit)}: cannot read: {e}") from e
        if length is not None and self._window_start + raw >= length:
            done = True
        if self.shuffle_buffer > 0 and len(docs) > 1:
            order = window_permutation(
                len(docs), seed=self.seed, epoch=self._epoch, unit=unit, window=self._window_start
            )
            docs = [docs[i] for i in order]
        if done:
            self._close_unit()
        self._window, self._window_raw, self._unit_done, self._loaded = docs, raw, done, True

    def _position(self) -> tuple[int, int, int, np.ndarray | None]:
        """Where the walker is between windows: what a bulk take that took nothing goes back to."""
        return self._epoch, self._pos, self._window_start, self._order

    def _set_position(self, position: tuple[int, int, int, np.ndarray | None]) -> None:
        self._epoch, self._pos, self._window_start, self._order = position

    def _between_windows(self) -> bool:
        """Step past a window read through; True when none is open (a bulk ``take_tokens`` may take over)."""
        if self._loaded and self._emitted >= len(self._window):
            self._next_window()
        return not self._loaded

    def _close_unit(self) -> None:
        it, self._it = getattr(self, "_it", None), None
        close = getattr(it, "close", None)
        if close is not None:
            close()

    def __getstate__(self) -> dict[str, Any]:
        # Open files and generators do not travel (DataLoader workers): the copy re-opens the
        # unit and re-reads the current window, exactly as a restore from get_state() does.
        state = self.__dict__.copy()
        state.update(_it=None, _window=[], _window_raw=0, _unit_done=False, _loaded=False, _order=None, _inherited=[],
                     _work_cache=None)
        state["_skipped"] = self._skipped_before_window if self._loaded else self._skipped
        state.update({k: {} for k in state if k.endswith("_handles")})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()  # a copy (a spawned worker) opens its own files: nothing inherited
