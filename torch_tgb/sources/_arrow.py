"""Documents from Arrow record batches: the base and column logic Lance and Parquet share.

A token column is a list (``list``, ``large_list`` or ``fixed_size_list``) of
integers — what Hugging Face ``datasets`` writes for ``input_ids``; a text
column is ``string``/``large_string`` and needs a tokenizer. Imports pyarrow,
so only the Lance and Parquet modules import this one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import Document, ReadOptions, UnitSource, require
from torch_tgb.sources._inputs import TOKEN_DTYPES, Tokenizer, as_tokens, tokenize
from torch_tgb.sources._bulk import Taken, take_all_or_nothing
from torch_tgb.transforms.provenance import doc_ids
from torch_tgb.sources._read_ahead import ReadAhead, Tokens
from torch_tgb.transforms.tokens import token_ids_problem

if TYPE_CHECKING:
    from typing_extensions import Unpack

pa = require("pyarrow", "parquet")
pc = require("pyarrow.compute", "parquet")

__all__ = ["ArrowOptions", "ArrowSource", "check_column", "documents", "token_arrays"]


class ArrowOptions(ReadOptions, total=False):
    """The keywords of the Arrow sources besides ``column`` (``**options``)."""

    tokenizer: Tokenizer | None  # needed for a text column
    extra: Sequence[str]  # columns yielded along with the tokens
    batch_size: int  # rows per record batch read (and per tokenizer call)
    decode_ahead: int  # record batches the bulk path decodes ahead on a thread of its own (0: none)
    storage_options: dict[str, Any] | None  # for fsspec / object-store URLs


class ArrowSource(UnitSource):
    """A source whose units are read as Arrow record batches of a token or text column."""

    RECORD_NAME, UNIT_NAME = "row", "row group"

    def __init__(
        self,
        *,
        column: str,
        tokenizer: Tokenizer | None = None,
        extra: Sequence[str] = (),
        batch_size: int = 256,
        decode_ahead: int = 4,
        storage_options: dict[str, Any] | None = None,
        **options: Unpack[ReadOptions],
    ) -> None:
        super().__init__(**options)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if decode_ahead < 0:
            raise ValueError(f"decode_ahead must be >= 0, got {decode_ahead}")
        self.decode_ahead = decode_ahead
        self.column, self.tokenizer, self.extra = column, tokenizer, tuple(extra)
        self.batch_size = batch_size
        self.storage_options = dict(storage_options or {})
        self._handles: dict[str, Any] = {}
        self._text = False
        self._stored: np.dtype | None = None
        self._bulk: _Bulk | None = None
        self._ahead: ReadAhead | None = None

    def _clear_window(self) -> None:
        super()._clear_window()
        self._drop_readers()

    def _fill(self) -> None:
        self._drop_readers()  # the per-record path reads the files itself: the read-ahead thread stops first
        super()._fill()

    def _drop_readers(self) -> None:
        """Forget the bulk reader and stop the read-ahead thread that feeds it (the two go together)."""
        self._bulk = None
        ahead, self._ahead = getattr(self, "_ahead", None), None
        if ahead is not None:
            ahead.close()

    def _after_fork(self) -> None:
        if os.getpid() != self._pid:  # the parent's reader and read-ahead thread: set aside, never used
            self._inherited.append((self._bulk, self._ahead))
            self._bulk = self._ahead = None
        super()._after_fork()

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_bulk": None, "_ahead": None}

    @property
    def columns(self) -> list[str]:
        return [self.column, *self.extra]

    def _check_schema(self, schema: Any, where: str) -> None:
        self._text = check_column(schema, self.column, self.extra, self.tokenizer, where)
        if not self._text:  # the widest id type of the files read
            stored = np.dtype(schema.field(self.column).type.value_type.to_pandas_dtype())
            self._stored = stored if self._stored is None else np.promote_types(self._stored, stored)

    @property
    def token_dtype(self) -> np.dtype | None:
        """The dtype of the column's ids as stored (None for text: a tokenizer's ids), what a packer may keep."""
        return None if self._text else self._stored

    def _batches(self, unit: int, start: int, batch_size: int) -> tuple[Iterable[Any], int]:
        """Record batches of ``self.columns`` of ``unit`` from about row ``start``, and how many leading rows to drop."""
        raise NotImplementedError

    def _records(self, unit: int, start: int) -> Iterator[Document | SourceError]:
        batches, skip = self._batches(unit, start, self.batch_size)
        name, first_row = self._unit_name(unit), start - skip
        return documents(
            batches,
            column=self.column,
            text=self._text,
            extra=self.extra,
            tokenizer=self.tokenizer,
            skip=skip,
            where=lambda row: f"{name} row {first_row + row}",
        )

    # --- the bulk path -------------------------------------------------------------------

    def take_tokens(self, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`take_documents` without the documents' ids."""
        taken = self.take_documents(limit)
        return None if taken is None else (taken[0], taken[1])

    def take_documents(self, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Up to ``limit`` next documents at once, as ``(flat tokens, int64 offsets, ids [n, 3])``.

        What ``limit`` calls of ``next()`` would yield, and the same state after
        it, read a record batch at a time without a tensor or a dict per
        document: the bulk path a packer reads through (``datapipes.Pack``).
        None where it does not apply (text, ``extra`` columns, a shuffle
        window, errors skipped) or where a record
        is bad (a null, a negative id, a dtype that is not a token dtype): the
        caller then iterates, and the per-record path names the record. A
        read that fails raises with the position where it was (nothing taken).
        """
        if self._text or self.extra or self.shuffle_buffer or self.on_error != "raise" or not self._between_windows():
            return None
        self._after_fork()
        self._close_unit()  # a per-record reader inside the unit: the bulk reader opens at the same row
        return take_all_or_nothing(self, lambda: self._take_bulk(limit), np.dtype(np.int64))

    def _set_position(self, position: tuple[int, int, int, np.ndarray | None]) -> None:
        self._drop_readers()  # a take that took nothing: its readers are dropped with it
        super()._set_position(position)

    def _take_bulk(self, limit: int) -> Taken | None:
        """:meth:`take_tokens`' walk: the documents' tokens and lengths, the position past them; None: a bad record."""
        flats: list[np.ndarray] = []
        lengths: list[np.ndarray] = []
        ids: list[np.ndarray] = []
        need = limit
        while need > 0 and self._ensure_unit():
            chunk = self._bulk_chunk()
            if chunk is None:  # a record the per-record path must name: nothing taken
                return None
            take = chunk.take(need)
            if take is None:  # the unit is read through
                self._bulk = None
                self._pos, self._window_start = self._pos + 1, 0
                continue
            flat, lens = take
            flats.append(flat)
            lengths.append(lens)
            unit = int(self._assignment()[self._pos])
            ids.append(self._document_ids(unit, self._window_start, len(lens)))
            need -= len(lens)
            self._window_start += len(lens)
            length = self._unit_length(int(self._assignment()[self._pos]))
            if length is not None and self._window_start >= length:  # read through: point past it, as next() does
                self._bulk = None
                self._pos, self._window_start = self._pos + 1, 0
        return flats, lengths, ids

    def _document_ids(self, unit: int, first: int, count: int) -> np.ndarray:
        """The ids of records ``first .. first + count - 1`` of walker unit ``unit`` (``[count, 3]``)."""
        prov_unit, record, start = self._record_id(unit, first)
        return doc_ids(self._unit_key(prov_unit), np.arange(record, record + count), start)

    def _bulk_chunk(self) -> _Bulk | None:
        """The bulk reader of the current unit at ``_window_start`` (opened if need be); None: a bad record."""
        key = (self._epoch, self._pos)
        if self._bulk is None or self._bulk.key != key or self._bulk.row != self._window_start:
            unit, row = int(self._assignment()[self._pos]), self._window_start
            items = self._decoded_ahead(key, row) if self.decode_ahead else _decode(self, unit, row)
            self._bulk = _Bulk(key, row, items)
        return self._bulk if self._bulk.fill() else None

    def _decoded_ahead(self, key: tuple[int, int], row: int) -> Iterator[Tokens]:
        """The token arrays of unit ``key`` from ``row``, from the read-ahead thread (started here if need be)."""
        items = None if self._ahead is None else self._ahead.open(key, row)
        if items is None:  # not what the thread reads (a restore, a fall back, a new epoch): from here on
            self._drop_readers()
            order = self._assignment()
            units = [((self._epoch, p), int(order[p])) for p in range(self._pos, len(order))]
            self._ahead = ReadAhead(self, units, row, _decode, depth=self.decode_ahead)
            items = self._ahead.open(key, row)
            assert items is not None  # the first unit of a fresh read-ahead
        return items


def _decode(source: ArrowSource, unit: int, row: int) -> Iterator[Tokens]:
    """The token arrays of ``unit``'s record batches from ``row`` (the iterator does not hold ``source``)."""
    batches, skip = source._batches(unit, row, max(source.batch_size, 4096))
    return _tokens_of(iter(batches), skip, source.column)


def _tokens_of(batches: Iterator[Any], skip: int, column: str) -> Iterator[Tokens]:
    for batch in batches:
        if skip:
            dropped = min(skip, batch.num_rows)
            batch, skip = batch.slice(dropped), skip - dropped
        yield token_arrays(batch.column(column))


class _Bulk:
    """A unit read as token arrays, record batch by record batch, for :meth:`ArrowSource.take_tokens`."""

    def __init__(self, key: tuple[int, int], row: int, items: Iterator[Tokens]) -> None:
        self.key, self.row = key, row  # the unit (epoch, position) and the next row to take
        self._items = items  # each record batch's token arrays (None: a bad record)
        self._flat: np.ndarray = np.zeros(0, dtype=np.int64)
        self._offsets: np.ndarray = np.zeros(1, dtype=np.int64)
        self._at = 0  # documents of the current batch already taken
        self._end = False

    def fill(self) -> bool:
        """Take the next record batch when the current one is used up; False on a bad record."""
        while self._at >= len(self._offsets) - 1 and not self._end:
            got = next(self._items, _END)
            if got is _END:
                self._end = True
                break
            if got is None:
                return False
            self._flat, self._offsets = got
            self._at = 0
        return True

    def take(self, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Up to ``limit`` documents of the current batch as ``(flat, lengths)``; None when the unit is read through."""
        if self._at >= len(self._offsets) - 1:
            return None
        stop = min(len(self._offsets) - 1, self._at + limit)
        a, b = int(self._offsets[self._at]), int(self._offsets[stop])
        lengths = np.diff(self._offsets[self._at : stop + 1])
        self._at = stop
        self.row += len(lengths)
        return self._flat[a:b], lengths


_END: Any = object()  # after a unit's last record batch


def token_arrays(values: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """A list column as ``(flat tokens, int64 offsets)``; None if a row is null or not a valid token row."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        return None
    lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(values).to_numpy(zero_copy_only=False)
    if flat.dtype.str.lstrip("<=|") not in TOKEN_DTYPES or token_ids_problem(flat) is not None:
        return None
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return flat, offsets


def check_column(schema: Any, column: str, extra: Sequence[str], tokenizer: Tokenizer | None, where: str) -> bool:
    """Validate ``column`` (and ``extra``) against ``schema``; True when it holds text."""
    names = set(schema.names)
    for name in (column, *extra):
        if name not in names:
            raise SourceError(f"{where}: no column {name!r}; columns are {sorted(names)}")
    kind = schema.field(column).type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if tokenizer is None:
            raise SourceError(f"{where}: column {column!r} holds text; pass tokenizer= to read it")
        return True
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)) and (
        pa.types.is_integer(kind.value_type)
    ):
        return False
    raise SourceError(f"{where}: column {column!r} has type {kind}; expected a list of integers or a string")


def documents(
    batches: Iterable[Any],
    *,
    column: str,
    text: bool,
    extra: Sequence[str],
    tokenizer: Tokenizer | None,
    skip: int,
    where: Callable[[int], str],
) -> Iterator[Document | SourceError]:
    """Documents of the rows of ``batches`` after the first ``skip`` rows (``where(row)`` names a row)."""
    row = 0
    for batch in batches:
        if row + batch.num_rows <= skip:
            row += batch.num_rows
            continue
        if row < skip:
            batch = batch.slice(skip - row)
            row = skip
        values = batch.column(column)
        at = _offset(where, row)
        tokens = _text_tokens(values, tokenizer, at) if text else _list_tokens(values, at)
        extras = {name: batch.column(name).to_pylist() for name in extra}
        for i, out in enumerate(tokens):
            if isinstance(out, SourceError):
                yield out
            else:
                yield {"tokens": out, **{name: extras[name][i] for name in extra}}
        row += batch.num_rows


def _offset(where: Callable[[int], str], first: int) -> Callable[[int], str]:
    return lambda i: where(first + i)


def _list_tokens(values: Any, where: Callable[[int], str]) -> list[Any]:
    """One token tensor per row of a list column, sliced from the flattened values in one pass."""
    lengths = pc.list_value_length(values).fill_null(0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(values).to_numpy(zero_copy_only=False)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    ends = np.cumsum(lengths)
    return [
        as_tokens(flat[end - n : end], where(i)) if valid[i] else SourceError(f"{where(i)}: null tokens")
        for i, (n, end) in enumerate(zip(lengths, ends))
    ]


def _text_tokens(values: Any, tokenizer: Tokenizer | None, where: Callable[[int], str]) -> list[Any]:
    if tokenizer is None:
        raise SourceError(f"{where(0)}: a text column needs tokenizer=")
    strings = values.to_pylist()
    good = [i for i, s in enumerate(strings) if s is not None]
    out: list[Any] = [SourceError(f"{where(i)}: null text") for i in range(len(strings))]
    for i, tokens in zip(good, tokenize([strings[i] for i in good], tokenizer, lambda k: where(good[k]))):
        out[i] = tokens
    return out
