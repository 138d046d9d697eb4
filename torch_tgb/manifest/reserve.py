"""A local namespace's space reserve: room for the Reclaimer's own writes when the disk is full.

Reclamation has to *write* before it may delete the steps below the safe
boundary: the snapshot of the boundary version and the boundary generation
(docs/protocol.md, *GC boundary*). On a disk filled to the last block (a
producer ran until ``StorageFull``) those puts fail, and a pass whose
boundary has not moved yet could free nothing. So a namespace on a local
file system keeps ``_tgb/reserve``, a file of :data:`RESERVE_BYTES` zeros
written when the namespace is created: a pass that meets ``StorageFull``
while writing its snapshot or boundary deletes it, writes them into the
room it leaves, deletes what the new boundary allows, and writes the
reserve again. Nothing reads the reserve; deleting it never touches data or
the log, so releasing it is safe at any time. Stores that do not fill up
the same way (object stores, memory) keep none.
"""

from __future__ import annotations

import logging

from torch_tgb.errors import ObjectNotFound, StorageFull
from torch_tgb.storage import ObjectStore

__all__ = ["RESERVE_BYTES", "RESERVE_KEY", "create_reserve", "keeps_reserve", "release_reserve"]

log = logging.getLogger(__name__)

RESERVE_KEY = "_tgb/reserve"
#: room for a snapshot, the hint and a boundary generation of a namespace of a few hundred producers
RESERVE_BYTES = 64 * 1024


def keeps_reserve(store: ObjectStore) -> bool:
    """Whether ``store`` is a local file system, whose namespace keeps a reserve."""
    return store.local_path(RESERVE_KEY) is not None


def create_reserve(store: ObjectStore, size: int = RESERVE_BYTES) -> bool:
    """Write the reserve unless it is there (best effort: a full disk only logs); True if it is there now."""
    if not keeps_reserve(store):
        return False
    try:
        if store.exists(RESERVE_KEY):
            return True
        store.put(RESERVE_KEY, bytes(size))
    except StorageFull as e:
        log.warning("%s: no room for the space reserve %s (%s); the next reclaim pass writes it", store.url,
                    RESERVE_KEY, e)
        return False
    return True


def release_reserve(store: ObjectStore) -> int:
    """Delete the reserve; the bytes it held (0 if there was none)."""
    if not keeps_reserve(store):
        return 0
    try:
        size = store.size(RESERVE_KEY)
    except ObjectNotFound:
        return 0
    store.delete([RESERVE_KEY])
    return size
