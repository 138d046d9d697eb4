"""What a namespace's ``dataset.json`` tells a reader, read once per reader and shared with later ones."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from torch_tgb.layout import Layout
from torch_tgb.manifest import DatasetInfo

__all__ = ["Written", "dataset_identity", "written_of"]


class Written(NamedTuple):
    """The written layout, the schema, the metadata, and the record's identity (which namespace this is)."""

    layout: Layout
    schema: dict[str, Any]
    metadata: dict[str, Any]
    identity: str


def dataset_identity(info: DatasetInfo) -> str:
    """The sha256 of the namespace's dataset.json record (canonical): two namespaces created apart differ."""
    return hashlib.sha256(info.encode()).hexdigest()


def written_of(info: DatasetInfo) -> Written:
    return Written(Layout.from_json(info.layout), dict(info.schema), dict(info.metadata), dataset_identity(info))
