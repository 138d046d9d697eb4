"""``open_store``: a namespace URL (or a store) to a ready :class:`ObjectStore`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from torch_tgb.storage._azure import AZURE_SCHEMES, AzureBlobStore
from torch_tgb.storage._base import ObjectStore
from torch_tgb.storage._gcs import GCS_SCHEMES, GCSStore
from torch_tgb.storage.fsspec_store import FsspecStore, redact_url
from torch_tgb.storage.local import LocalStore
from torch_tgb.storage.memory import MemoryStore
from torch_tgb.storage.retry import RetryingStore, RetryPolicy

__all__ = ["open_store"]

_LOCAL_OPTIONS = frozenset({"fsync"})


def open_store(
    url_or_store: str | os.PathLike[str] | ObjectStore,
    storage_options: Mapping[str, Any] | None = None,
    *,
    retry: RetryPolicy | None = None,
) -> ObjectStore:
    """Open the namespace at ``url_or_store``.

    * an :class:`ObjectStore` is returned as is (it was configured already);
    * a bare path or ``file://`` URL is a :class:`LocalStore`
      (``storage_options`` may hold ``fsync``);
    * ``memory://name`` is a :class:`MemoryStore` (no options);
    * ``gs://`` and ``gcs://`` are a :class:`GCSStore` (``pip install "torch-tgb[gcs]"``),
      ``az://``, ``abfs://`` and ``abfss://`` an :class:`AzureBlobStore` (``[azure]``);
      ``storage_options`` as gcsfs and adlfs name them;
    * anything else is an :class:`FsspecStore` with ``storage_options``
      passed to fsspec (e.g. ``endpoint_url``, ``key``, ``secret``).

    Stores built here are wrapped in :class:`RetryingStore` with ``retry``
    (default :class:`RetryPolicy`).
    """
    if isinstance(url_or_store, ObjectStore):
        if storage_options:
            raise ValueError(
                f"{url_or_store.url}: storage_options apply only when opening a URL, not a store object"
            )
        return url_or_store
    url = os.fspath(url_or_store)
    if not isinstance(url, str) or not url:
        raise ValueError(f"a namespace must be a non-empty URL or path, got {url_or_store!r}")
    options = dict(storage_options or {})
    scheme = urlsplit(url).scheme if "://" in url else ""
    inner: ObjectStore
    if scheme in ("", "file", "local"):
        unknown = sorted(set(options) - _LOCAL_OPTIONS)
        if unknown:
            raise ValueError(f"{redact_url(url)}: storage_options {unknown} do not apply to a local directory")
        path = url.split("://", 1)[1] if scheme else url
        inner = LocalStore(path, **options)
    elif scheme == "memory":
        if options:
            raise ValueError(f"{url}: a memory:// namespace takes no storage_options")
        inner = MemoryStore(url.split("://", 1)[1])
    elif scheme in GCS_SCHEMES:
        inner = GCSStore(url, options)
    elif scheme in AZURE_SCHEMES:
        inner = AzureBlobStore(url, options)
    else:
        inner = FsspecStore(url, options)
    return RetryingStore(inner, retry)
