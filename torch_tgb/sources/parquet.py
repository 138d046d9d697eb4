"""Parquet and Arrow files (what Hugging Face ``datasets`` writes): documents by row group / record batch.

``column`` is a list-of-integers token column (``input_ids``) or a string
column read with ``tokenizer=``. Units of sharding are the row groups of all
Parquet files and the record batches of all Arrow IPC files (``*.arrow``,
file or stream format: ``datasets.save_to_disk`` writes the stream format),
in file order, counted when the source is made. A Parquet unit is read with
``ParquetFile.iter_batches`` on its one row group; an Arrow file is memory
mapped (zero copy) and a unit is one of its record batches. Resuming inside a
unit decodes it again and drops the rows already read. Paths are local files,
directories (their ``*.parquet`` files, else their ``*.arrow`` files, sorted),
local glob patterns (their matches, sorted) or fsspec URLs (``s3://...``,
opened with ``storage_options``; an Arrow file is then read whole). Needs the
``parquet`` extra (pyarrow).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import require
from torch_tgb.sources._inputs import glob_matches

pq = require("pyarrow.parquet", "parquet")
pa = require("pyarrow", "parquet")

from torch_tgb.sources._arrow import ArrowOptions, ArrowSource  # noqa: E402  (after the extra check)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Parquet"]

#: Parquet/Arrow files a source keeps open at once (see :meth:`Parquet._file`)
MAX_OPEN_FILES = 16
#: footers read at once while a source is made (see :func:`_scan`)
SCAN_THREADS = 16

_T = TypeVar("_T")


class Parquet(ArrowSource):
    """Documents of the rows of Parquet (and Arrow IPC) files; units are row groups (record batches).

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
        scan = _scan(self._describe, self.paths)
        try:
            for f, (path, (schema, rows)) in enumerate(zip(self.paths, scan)):
                self._check_schema(schema, path)
                self._units += [(f, unit, n) for unit, n in enumerate(rows)]
        finally:
            scan.close()  # a file refused: the footers not read yet are cancelled now, not when the error is gone
        where = ", ".join(self.paths) or "Parquet(paths=[])"
        if self._units and not any(rows for _, _, rows in self._units):  # row groups of 0 rows: nothing either
            raise SourceError(f"{where}: empty source, nothing to read (0 rows)")
        self._set_num_units(len(self._units), where)

    def _describe(self, path: str) -> tuple[Any, list[int]]:
        """``(schema, rows of each unit)`` of one file, from its footer (opened for this only)."""
        handle = self._open(path)
        if _is_arrow(path):
            return handle.schema, [batch.num_rows for batch in handle.to_batches()]
        meta = handle.metadata
        return handle.schema_arrow, [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]

    def _file(self, f: int) -> Any:
        """A ``ParquetFile``, or for an Arrow IPC file its ``Table`` (memory mapped when local).

        At most :data:`MAX_OPEN_FILES` stay open, the least recently read
        dropped first: a corpus of thousands of files (a Hugging Face dataset's
        shards) would otherwise hold a descriptor and a mapping for each, and
        run out of descriptors (``ulimit -n`` is often 1024). A dropped file
        closes once no reader of it is left (a unit being read keeps its own).
        """
        path = self.paths[f]
        handle = self._handles.pop(path, None)
        if handle is None:
            handle = self._open(path)
            while len(self._handles) >= MAX_OPEN_FILES:
                del self._handles[next(iter(self._handles))]  # the least recently read
        self._handles[path] = handle  # the most recently read last
        return handle

    def _open(self, path: str) -> Any:
        if "://" not in path:
            _check_regular(path)  # a FIFO would block the open forever
        if _is_arrow(path):
            return self._arrow_table(path)
        try:
            if "://" in path:
                fsspec = require("fsspec", "parquet")
                fs, inner = fsspec.core.url_to_fs(path, **self.storage_options)
                return pq.ParquetFile(fs.open(inner, "rb"))
            return pq.ParquetFile(path, memory_map=True)
        except FileNotFoundError as e:
            raise SourceError(f"{path}: no such Parquet file") from e
        except pa.ArrowInvalid as e:  # a ValueError: the bytes are not Parquet
            raise SourceError(f"{path}: not a Parquet file: {e}") from e
        except OSError as e:  # the file is there but cannot be opened or read (permissions, descriptors, I/O)
            raise SourceError(f"{path}: cannot read the Parquet file: {e}") from e
        except Exception as e:  # anything else pyarrow raises on a bad file
            raise SourceError(f"{path}: not a Parquet file: {e}") from e

    def _arrow_table(self, path: str) -> Any:
        try:
            if "://" in path:
                fsspec = require("fsspec", "parquet")
                fs, inner = fsspec.core.url_to_fs(path, **self.storage_options)
                with fs.open(inner, "rb") as fh:
                    source: Any = pa.BufferReader(fh.read())
            else:
                source = pa.memory_map(path)
            try:
                return pa.ipc.open_file(source).read_all()
            except pa.ArrowInvalid:  # not the file format: the stream format (datasets.save_to_disk)
                source.seek(0)
                return pa.ipc.open_stream(source).read_all()
        except FileNotFoundError as e:
            raise SourceError(f"{path}: no such Arrow file") from e
        except Exception as e:  # ArrowInvalid (a ValueError) and OSError
            raise SourceError(f"{path}: not an Arrow IPC file: {e}") from e

    def _unit_name(self, unit: int) -> str:
        f, group, _ = self._units[unit]
        what = "record batch" if _is_arrow(self.paths[f]) else "row group"
        return f"{self.paths[f]} {what} {group}"

    def _unit_length(self, unit: int) -> int:
        return self._units[unit][2]

    def _provenance_units(self) -> list[str]:
        return list(self.paths)  # a record is a row of its file

    def _record_id(self, unit: int, index: int) -> tuple[int, int, int]:
        """Row ``index`` of a row group (a record batch) is row ``first row of the group + index`` of its file."""
        firsts: list[int] | None = self.__dict__.get("_group_firsts")
        if firsts is None:
            firsts = []
            seen: dict[int, int] = {}
            for f, _, rows in self._units:
                firsts.append(seen.get(f, 0))
                seen[f] = seen.get(f, 0) + rows
            self._group_firsts = firsts
        return self._units[unit][0], firsts[unit] + index, 0

    def _batches(self, unit: int, start: int, batch_size: int) -> tuple[Iterator[Any], int]:
        f, group, rows = self._units[unit]
        if _is_arrow(self.paths[f]):
            batch = self._file(f).select(self.columns).to_batches()[group]
            return (batch.slice(i, batch_size) for i in range(start, rows, batch_size)), 0
        return self._file(f).iter_batches(batch_size=batch_size, row_groups=[group], columns=self.columns), start


def _scan(describe: Callable[[str], _T], paths: list[str]) -> Generator[_T, None, None]:
    """``describe(path)`` of every path, in order, :data:`SCAN_THREADS` at a time.

    A footer on an object store is a round trip or more: thousands of shards
    read one after the other would take minutes before the first document. A
    failure is raised where its path comes in order (the files after it are
    not waited for); a scan of more than a few seconds shows a progress bar on
    a terminal.
    """
    if len(paths) <= 1:
        yield from map(describe, paths)
        return
    from torch_tgb._progress import progress

    pool = ThreadPoolExecutor(min(SCAN_THREADS, len(paths)), thread_name_prefix="tgb-parquet-scan")
    try:
        with progress(total=len(paths), desc="reading Parquet footers", unit="file", delay=2.0) as bar:
            for described in pool.map(describe, paths):
                bar.update()
                yield described
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _expand(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The files of ``paths`` (one or a list): a local directory's Parquet files (else its Arrow files) and a local
    glob pattern's matches (``*``, ``?``, ``[...]``), both sorted; anything else as named."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: list[str] = []
    for item in (os.fspath(i) for i in items):
        matched = glob_matches(item, "Parquet or Arrow file")
        if matched is not None:
            out += matched
        elif "://" not in item and os.path.isdir(item):
            names = sorted(os.listdir(item))
            found = [n for n in names if n.endswith(".parquet")] or [n for n in names if _is_arrow(n)]
            if not found:
                raise SourceError(f"{item}: empty source, no *.parquet or *.arrow files in the directory")
            out += [os.path.join(item, n) for n in found]
        else:
            out.append(item)
    return out


def _check_regular(path: str) -> None:
    """A :class:`SourceError` unless ``path`` is a regular file (never opened otherwise: a FIFO blocks)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError as e:
        raise SourceError(f"{path}: no such {'Arrow' if _is_arrow(path) else 'Parquet'} file") from e
    except OSError as e:
        raise SourceError(f"{path}: cannot stat: {e}") from e
    if not stat.S_ISREG(mode):
        raise SourceError(f"{path}: not a regular file (a FIFO, device or directory); refused")


def _is_arrow(path: str) -> bool:
    return path.endswith((".arrow", ".feather", ".ipc"))
