"""The base of the sources whose units are files, one record each (``Videos``, ``Audio``)."""

from __future__ import annotations

from collections.abc import Iterator

from torch_tgb.errors import SourceError
from torch_tgb.sources._base import Document, UnitSource

__all__ = ["FileSource"]


class FileSource(UnitSource):
    """Units are the files of ``self.paths`` (set before ``_set_num_units``); a subclass gives ``_record(path)``.

    A file is one record, so a state is a position in the walk over files
    and a resume never reopens a file it has passed.
    """

    paths: list[str]
    RECORD_NAME = UNIT_NAME = "file"

    def _record(self, path: str) -> Iterator[Document | SourceError]:
        """The file's one record (a document, or the error that makes it a bad record)."""
        raise NotImplementedError

    def _unit_name(self, unit: int) -> str:
        return self.paths[unit]

    def _unit_length(self, unit: int) -> int | None:
        return 1

    def _records(self, unit: int, start: int) -> Iterator[Document | SourceError]:
        if start == 0:
            yield from self._record(self.paths[unit])
