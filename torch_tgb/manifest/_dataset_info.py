"""``DatasetInfo``: the record of ``_tgb/dataset.json`` (written once, compared by every producer and consumer)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._json import MAX_DATASET_BYTES, Fields, dump_json, load_json
from torch_tgb.manifest.keys import FLAT, KeyLayout

__all__ = ["DatasetInfo"]

#: the ``format`` field of dataset.json (flat keys: what every torch_tgb reads)
FORMAT = "tgb-manifest/1"
#: the ``format`` of a namespace whose manifest keys are spread over prefixes (a ``keys`` field): a reader
#: that predates spreading refuses it by this format instead of probing keys that do not exist and reading nothing
FORMAT_SPREAD = "tgb-manifest/2"


@dataclass(frozen=True)
class DatasetInfo:
    """``_tgb/dataset.json``: written once, compared by every producer and consumer."""

    layout: Mapping[str, Any]
    schema: Mapping[str, Any]
    metadata: Mapping[str, Any]
    fingerprint: str
    created_at: float = 0.0
    #: where the manifest's numbered objects live (docs/protocol.md, *Manifest keys spread over prefixes*)
    keys: KeyLayout = FLAT

    def to_json(self) -> dict[str, Any]:
        spread = self.keys.to_json()
        return {
            "format": FORMAT if spread is None else FORMAT_SPREAD,
            **({} if spread is None else {"keys": spread}),
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
        if fmt not in (FORMAT, FORMAT_SPREAD):
            raise ManifestError(f"{f.what}: format {fmt!r} is not one of {[FORMAT, FORMAT_SPREAD]} (written by "
                                "another torch_tgb version? a newer one: upgrade torch_tgb to read it)")
        spread = f.optional_mapping("keys")
        if (spread is None) != (fmt == FORMAT):
            raise ManifestError(f"{f.what}: format {fmt!r} " + ("has no" if spread is None else "has a") + " keys field")
        try:
            keys = KeyLayout.from_json(spread, what=f.what)
        except ValueError as e:
            raise ManifestError(str(e)) from e
        info = cls(f.mapping("layout"), f.mapping("schema"), f.mapping("metadata"), f.string("fingerprint"),
                   f.number("created_at"), keys)
        f.done()
        return info
