"""``open_store``: a namespace URL (or a store) to a ready :class:`ObjectStore`; ``STORES``: schemes to backends.

A URL's scheme picks its backend in :data:`STORES`, a :class:`~torch_tgb._registry.Registry`
of ``factory(url, storage_options) -> ObjectStore``; a scheme nobody registered
goes to fsspec. A new backend is one registration (``STORES.register("myscheme",
factory)``), or an entry point in group ``torch_tgb.stores`` of its own package.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from torch_tgb._registry import Registry
from torch_tgb.storage._azure import AZURE_SCHEMES, AzureBlobStore
from torch_tgb.storage._base import ObjectStore
from torch_tgb.storage._gcs import GCS_SCHEMES, GCSStore
from torch_tgb.storage.fsspec_store import FsspecStore, redact_url
from torch_tgb.storage.local import LocalStore
from torch_tgb.storage.memory import MemoryStore
from torch_tgb.storage.retry import RetryingStore, RetryPolicy

__all__ = ["STORES", "StoreFactory", "open_store"]

_LOCAL_OPTIONS = frozenset({"fsync"})

#: ``factory(url, storage_options) -> ObjectStore``: opens the namespace at ``url`` (its own options only)
StoreFactory = Callable[[str, dict[str, Any]], ObjectStore]

#: URL scheme -> store factory (a bare path is ``file``); unregistered schemes go to :class:`FsspecStore`
STORES: Registry[StoreFactory] = Registry("store scheme", group="torch_tgb.stores")


def _local(url: str, options: dict[str, Any]) -> ObjectStore:
    unknown = sorted(set(options) - _LOCAL_OPTIONS)
    if unknown:
        raise ValueError(f"{redact_url(url)}: storage_options {unknown} do not apply to a local directory")
    return LocalStore(url.split("://", 1)[1] if "://" in url else url, **options)


def _memory(url: str, options: dict[str, Any]) -> ObjectStore:
    if options:
        raise ValueError(f"{url}: a memory:// namespace takes no storage_options")
    return MemoryStore(url.split("://", 1)[1])


for _scheme in ("file", "local"):
    STORES.register(_scheme, _local)
STORES.register("memory", _memory)
for _scheme in sorted(GCS_SCHEMES):
    STORES.register(_scheme, GCSStore)
for _scheme in sorted(AZURE_SCHEMES):
    STORES.register(_scheme, AzureBlobStore)
for _scheme in ("s3", "s3a"):  # named, so that opening them never reads the entry-point group
    STORES.register(_scheme, FsspecStore)


def open_store(
    url_or_store: str | os.PathLike[str] | ObjectStore,
    storage_options: Mapping[str, Any] | None = None,
    *,
    retry: RetryPolicy | None = None,
) -> ObjectStore:
    """Open the namespace at ``url_or_store``.

    * an :class:`ObjectStore` is returned as is (it was configured already);
    * a URL's scheme picks a factory in :data:`STORES` (a bare path is ``file``):
      ``file://`` and ``local://`` a :class:`LocalStore` (``storage_options`` may
      hold ``fsync``), ``memory://name`` a :class:`MemoryStore` (no options),
      ``gs://``/``gcs://`` a :class:`GCSStore` (``pip install "torch-tgb[gcs]"``),
      ``az://``/``abfs://``/``abfss://`` an :class:`AzureBlobStore` (``[azure]``),
      with ``storage_options`` as gcsfs and adlfs name them; a plugin's scheme its
      own backend;
    * anything else (``s3://`` too) is an :class:`FsspecStore` with ``storage_options``
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
    scheme = (urlsplit(url).scheme if "://" in url else "") or "file"
    factory = STORES[scheme] if scheme in STORES else FsspecStore
    return RetryingStore(factory(url, options), retry)
