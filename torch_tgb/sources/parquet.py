"""Parquet: documents from Parquet files (what Hugging Face ``datasets`` writes), by row group.

``column`` is a list-of-integers token column (``input_ids``) or a string
column read with ``tokenizer=``. Units of sharding are the row groups of all
files, in file order then row-group order, counted from the footers when the
source is made. A unit is read with ``ParquetFile.iter_batches`` on its one
row group; resuming inside it decodes the row group again and drops the rows
already read. Paths are local files, directories (their ``*.parquet`` files,
sorted) or fsspec URLs (``s3://...``, opened with ``storage_options``).
Needs the ``parquet`` extra (pyarrow).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import Document, require

pq = require("pyarrow.parquet", "parquet")

from torch_tgb.sources._arrow import ArrowOptions, ArrowSource  # noqa: E402  (after the extra check)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Parquet"]


class Parquet(ArrowSource):
    """Documents of the rows of Parquet files; units are row groups.

    ``column`` defaults to ``"input_ids"``; the other keywords are ``ArrowOptions``.
    """

    def __init__(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        column: str = "input_ids",
        **options: Unpack[ArrowOptions],
    ) -> None:
        super().__init__(column=column, **options)
        self.paths = _expand(paths)
        self._units: list[tuple[int, int, int]] = []  # (file index, row group, rows)
        for f, path in enumerate(self.paths):
            parquet_file = self._file(f)
            self._check_schema(parquet_file.schema_arrow, path)
            meta = parquet_file.metadata
            self._units += [(f, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
        self._set_num_units(len(self._units), ", ".join(self.paths) or "Parquet(paths=[])")

    def _file(self, f: int) -> Any:
        path = self.paths[f]
        if path not in self._handles:
            try:
                if "://" in path:
                    fsspec = require("fsspec", "parquet")
                    fs, inner = fsspec.core.url_to_fs(path, **self.storage_options)
                    self._handles[path] = pq.ParquetFile(fs.open(inner, "rb"))
                else:
                    self._handles[path] = pq.ParquetFile(path, memory_map=True)
            except FileNotFoundError as e:
                raise SourceError(f"{path}: no such Parquet file") from e
            except Exception as e:  # pyarrow raises ArrowInvalid (a ValueError) and OSError
                raise SourceError(f"{path}: not a Parquet file: {e}") from e
        return self._handles[path]

    def _unit_name(self, unit: int) -> str:
        f, group, _ = self._units[unit]
        return f"{self.paths[f]} row group {group}"

    def _unit_length(self, unit: int) -> int:
        return self._units[unit][2]

    def _records(self, unit: int, start: int) -> Iterator[Document | SourceError]:
        f, group, _ = self._units[unit]
        batches = self._file(f).iter_batches(batch_size=self.batch_size, row_groups=[group], columns=self.columns)
        return self._documents(batches, unit, skip=start, first_row=0)


def _expand(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: list[str] = []
    for item in (os.fspath(i) for i in items):
        if "://" not in item and os.path.isdir(item):
            found = sorted(os.path.join(item, n) for n in os.listdir(item) if n.endswith(".parquet"))
            if not found:
                raise SourceError(f"{item}: empty source, no *.parquet files in the directory")
            out += found
        else:
            out.append(item)
    return out
