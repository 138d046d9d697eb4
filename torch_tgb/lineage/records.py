"""Lists of records (``--records FILE``, ``--deny FILE``, ``--from-file IDS``): one ``SOURCE:UNIT:RECORD`` a line.

Blank lines and lines starting with ``#`` are skipped; anything else that is
not a record is refused with its line number (a typo must not shrink an
excision silently).
"""

from __future__ import annotations

import os

from torch_tgb.errors import ProvenanceError
from torch_tgb.transforms.provenance import RecordId

__all__ = ["read_records"]


def read_records(path: str | os.PathLike[str]) -> list[RecordId]:
    """The records listed in file ``path``, in order, each once."""
    out: dict[RecordId, None] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                out[RecordId.parse(text)] = None
            except ValueError as e:
                raise ProvenanceError(f"{os.fspath(path)}:{n}: {e}") from e
    return list(out)
