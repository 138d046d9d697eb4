"""Resolve the ``ns_or_store`` argument every lifecycle function takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch_tgb.storage import ObjectStore

__all__ = ["as_store"]


def as_store(ns_or_store: str | ObjectStore, storage_options: Mapping[str, Any] | None = None) -> ObjectStore:
    """An :class:`ObjectStore` passed in is used as is; a URL or path is opened."""
    if isinstance(ns_or_store, ObjectStore):
        return ns_or_store
    from torch_tgb.storage import open_store  # storage owns URL parsing and retries

    return open_store(ns_or_store, storage_options=dict(storage_options or {}))
