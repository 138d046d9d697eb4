"""``DatasetInfo``: the record of ``_tgb/dataset.json`` (written once, compared by every producer and consumer)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._json import MAX_DATASET_BYTES, Fields, dump_json, load_json

__all__ = ["DatasetInfo"]

#: the ``format`` field of dataset.json
FORMAT = "tgb-manifest/1"


@dataclass(frozen=True)
class DatasetInfo:
    """``_tgb/dataset.json``: written once, compared by every producer and consumer."""

    layout: Mapping[str, Any]
    schema: Mapping[str, Any]
    metadata: Mapping[str, Any]
    fingerprint: str
    created_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "layout": dict(self.layout),
            "schema": dict(self.schema),
            "metadata": dict(self.metadata),
            "fingerprint": self.fingerprint,
            "created_at": self.created_at,
        }

    def encode(self) -> bytes:
        return dump_json(self.to_json())

    @classmethod
    def decode(cls, data: bytes, *, what: str) -> DatasetInfo:
        f = Fields(load_json(data, what=what, max_bytes=MAX_DATASET_BYTES), what=what)
        fmt = f.string("format")
        if fmt != FORMAT:
            raise ManifestError(f"{f.what}: format {fmt!r} is not one of {[FORMAT]} (written by another torch_tgb "
                                "version? a newer one: upgrade torch_tgb to read it)")
        info = cls(f.mapping("layout"), f.mapping("schema"), f.mapping("metadata"), f.string("fingerprint"), f.number("created_at"))
        f.done()
        return info
