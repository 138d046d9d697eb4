"""Opening a namespace to read: waiting for it to appear (never silently), and the size of a sealed one."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from torch_tgb.consumer._open_cache import OPEN_CACHE, KnownNamespace
from torch_tgb.consumer._written import Written, written_of
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.datapipes.read.poller import PollPolicy
from torch_tgb.errors import DataTimeout, ManifestError, NamespaceNotFound
from torch_tgb.manifest import DatasetInfo, Manifest
from torch_tgb.manifest.keys import DATASET_KEY
from torch_tgb.storage import ObjectStore, open_store
from torch_tgb.storage.hot_tier import with_hot_tier
from torch_tgb.storage.node_share import with_node_share

__all__ = ["open_namespace", "sealed_steps", "wait_for_dataset"]

log = logging.getLogger(__name__)



def open_namespace(
    ns: str | ObjectStore, storage_options: Mapping[str, Any] | None, options: ReaderOptions, written: Written | None,
) -> tuple[ObjectStore, Manifest, KnownNamespace | None, Written]:
    """A reader's store (with its node share and hot tier), its manifest, what earlier readers in this process
    learnt of the namespace (``consumer/_open_cache.py``; None: nothing), and ``dataset.json`` (``written`` if known).
    """
    store = open_store(ns, storage_options or None)
    store = with_node_share(store, options.node_cache, handed_in=isinstance(ns, ObjectStore))
    store = with_hot_tier(store, options.cache_dir, options.cache_bytes)
    manifest = Manifest(store)
    # a store handed in is the caller's (it may count or fail reads on purpose): only paths are cached
    cached = options.open_cache and not isinstance(ns, ObjectStore)
    known = OPEN_CACHE.lookup(store, manifest) if cached else None
    if written is None:
        if known is not None:
            written = known.written
        else:
            info = wait_for_dataset(store, manifest, timeout=options.timeout, poll=options.poll)
            written = written_of(info)
    if cached and known is None:
        known = OPEN_CACHE.remember(store, manifest, written)
    return store, manifest, known, written


def wait_for_dataset(store: ObjectStore, manifest: Manifest, *, timeout: float | None, poll: PollPolicy) -> DatasetInfo:
    """The namespace's ``dataset.json``, waiting for it with backoff; a warning every ``poll.warn_every`` seconds.

    A missing bucket fails at once (``store.check_root``), and so does a local
    path whose parent directory does not exist (:class:`NamespaceNotFound`: a
    typo, since a producer would create the namespace's own directory, not
    its parents' ones by chance); ``DataTimeout`` after ``timeout`` seconds.
    """
    info = manifest.dataset()
    if info is None:
        store.check_root()  # a missing bucket fails now; a missing local directory may still appear
        _check_local_parent(store)  # ... but not under a parent directory that does not exist (a typo)
    started = time.monotonic()
    interval = poll.min_interval
    warn_every = poll.warn_every
    warn_at = warn_every
    while info is None:  # the consumer may start before the first producer
        waited = time.monotonic() - started
        if timeout is not None and waited >= timeout:
            raise DataTimeout(
                f"{store.url}: no TGB namespace there (no {DATASET_KEY}) within timeout={timeout}s: "
                "a mistyped path, or no producer has started yet"
            )
        if warn_at is not None and warn_every is not None and waited >= warn_at:
            log.warning(
                "%s: waiting %.0fs for a TGB namespace to appear (no %s yet): a mistyped path, or no "
                "producer has started yet; %s", store.url, waited, DATASET_KEY,
                "no timeout (timeout=None)" if timeout is None else f"timeout={timeout}s",
            )
            warn_at += warn_every
        sleep = interval if timeout is None else min(interval, timeout - waited)
        time.sleep(sleep if warn_at is None else max(0.0, min(sleep, warn_at - waited)))
        interval = min(interval * poll.backoff, poll.max_interval)
        info = manifest.dataset()
    return info


def sealed_steps(store: ObjectStore) -> int:
    """The number of steps of the sealed namespace on ``store``; ManifestError if it is not sealed (epochs read it)."""
    head = Manifest(store).head()
    if not head.sealed:
        raise ManifestError(f"{store.url}: shuffle/epochs read a sealed namespace; version "
                            f"{head.version} ({head.num_steps} steps) is not sealed")
    return int(head.num_steps)


def _check_local_parent(store: ObjectStore) -> None:
    """:class:`NamespaceNotFound` if ``store`` is a local directory whose parent directory does not exist."""
    path = store.local_path(DATASET_KEY)  # <root>/_tgb/dataset.json; None for a remote (or wrapped) store
    if path is None:
        return
    root = os.path.dirname(os.path.dirname(path))
    parent = os.path.dirname(root)
    if not os.path.isdir(root) and not os.path.isdir(parent):
        raise NamespaceNotFound(
            f"{store.url}: no TGB namespace can be there: the directory {parent!r} does not exist "
            "(a mistyped path?); a reader waits for a namespace only where its directory or its parent exists"
        )
