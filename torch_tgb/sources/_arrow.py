"""Documents from Arrow record batches: the base and column logic Lance and Parquet share.

A token column is a list (``list``, ``large_list`` or ``fixed_size_list``) of
integers — what Hugging Face ``datasets`` writes for ``input_ids``; a text
column is ``string``/``large_string`` and needs a tokenizer. Imports pyarrow,
so only the Lance and Parquet modules import this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import Document, ReadOptions, Tokenizer, UnitSource, as_tokens, require, tokenize

if TYPE_CHECKING:
    from typing_extensions import Unpack

pa = require("pyarrow", "parquet")
pc = require("pyarrow.compute", "parquet")

__all__ = ["ArrowOptions", "ArrowSource", "check_column", "documents"]


class ArrowOptions(ReadOptions, total=False):
    """The keywords of the Arrow sources besides ``column`` (``**options``)."""

    tokenizer: Tokenizer | None  # needed for a text column
    extra: Sequence[str]  # columns yielded along with the tokens
    batch_size: int  # rows per record batch read (and per tokenizer call)
    storage_options: dict[str, Any] | None  # for fsspec / object-store URLs


class ArrowSource(UnitSource):
    """A source whose units are read as Arrow record batches of a token or text column."""

    def __init__(
        self,
        *,
        column: str,
        tokenizer: Tokenizer | None = None,
        extra: Sequence[str] = (),
        batch_size: int = 256,
        storage_options: dict[str, Any] | None = None,
        **options: Unpack[ReadOptions],
    ) -> None:
        super().__init__(**options)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.column, self.tokenizer, self.extra = column, tokenizer, tuple(extra)
        self.batch_size = batch_size
        self.storage_options = dict(storage_options or {})
        self._handles: dict[str, Any] = {}
        self._text = False

    @property
    def columns(self) -> list[str]:
        return [self.column, *self.extra]

    def _check_schema(self, schema: Any, where: str) -> None:
        self._text = check_column(schema, self.column, self.extra, self.tokenizer, where)

    def _documents(self, batches: Iterable[Any], unit: int, *, skip: int, first_row: int) -> Iterator[Document | SourceError]:
        """Documents of ``batches`` (read from row ``first_row`` of ``unit``), the first ``skip`` dropped."""
        name = self._unit_name(unit)
        return documents(
            batches,
            column=self.column,
            text=self._text,
            extra=self.extra,
            tokenizer=self.tokenizer,
            skip=skip,
            where=lambda row: f"{name} row {first_row + row}",
        )


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
