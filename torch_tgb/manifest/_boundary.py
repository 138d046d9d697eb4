"""The GC boundary of one namespace: immutable generations on storage, read so that it never goes back.

Each boundary is a generation ``_tgb/gc_boundary/<version>-<step>``
created with ``put_if_absent`` under a key that is its value, so every
write of it, a delayed retry included, writes the same thing, and a late
write of an older boundary only re-creates a lower generation: the highest
one, which readers take, never goes back. A :class:`BoundaryView` also
never returns less than a boundary it already read or wrote (a store whose
LIST lags, or a generation deleted by hand), and re-creates that one when
asked to repair.
"""

from __future__ import annotations

import logging
import threading

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._json import dump_json
from torch_tgb.manifest._reads import boundary_generations, stored_boundary
from torch_tgb.manifest.keys import GC_BOUNDARY_KEY, boundary_key
from torch_tgb.manifest.records import GCBoundary
from torch_tgb.storage import ObjectStore

__all__ = ["BoundaryView", "drop_lower_generations"]

log = logging.getLogger(__name__)


class BoundaryView:
    """The boundary of one namespace as one client sees it: never lower than it saw. Thread-safe.

    The namespace's store is passed to each call (its owner's current one).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._highest = GCBoundary()  # highest boundary ever read or written

    def current(self, store: ObjectStore) -> GCBoundary:
        """The highest generation on storage, or the higher one this view already read or wrote."""
        return self.at_least_seen(self.stored(store))

    @staticmethod
    def stored(store: ObjectStore, generations: list[tuple[int, int]] | None = None) -> GCBoundary:
        """The highest generation on storage (``generations``: a listing already held; else one LIST)."""
        if generations is None:
            generations = boundary_generations(store)
        return stored_boundary(store, generations, where=f"{store.url}: ")

    def at_least_seen(self, stored: GCBoundary) -> GCBoundary:
        """``stored``, or the higher boundary this view already read or wrote."""
        with self._lock:
            if _order(stored) < _order(self._highest):
                return self._highest
            self._highest = stored
        return stored

    def put(self, store: ObjectStore, boundary: GCBoundary) -> None:
        """Create ``boundary``'s generation, check that storage lists it, then drop the lower ones."""
        with self._lock:
            if _order(boundary) > _order(self._highest):
                self._highest = boundary
        store.put_if_absent(boundary_key(boundary.version, boundary.step), dump_json(boundary.to_json()))
        generations = boundary_generations(store)
        stored = self.stored(store, generations)
        if _order(stored) < _order(boundary):
            raise ManifestError(
                f"{store.url}: GC boundary version={boundary.version}, step={boundary.step} was created but storage "
                f"lists version={stored.version}, step={stored.step}: nothing is deleted on its strength"
            )
        drop_lower_generations(store, stored, generations, legacy=True)

    def repair(self, store: ObjectStore) -> GCBoundary:
        """The boundary, after re-creating the highest one seen if storage no longer lists it."""
        generations = boundary_generations(store)
        stored = self.stored(store, generations)
        current = self.at_least_seen(stored)
        if stored != current:
            log.warning("%s: GC boundary on storage is below version=%d, step=%d; writing that generation again",
                        store.url, current.version, current.step)
            self.put(store, current)
        else:
            drop_lower_generations(store, current, generations, legacy=False)
        return current


def drop_lower_generations(
    store: ObjectStore, current: GCBoundary, generations: list[tuple[int, int]], *, legacy: bool
) -> None:
    """Delete the generations below ``current`` (which ``generations``, a fresh listing, holds).

    ``legacy``: also the pre-generation ``_tgb/gc_boundary.json`` (an
    advance does it; a pass with nothing lower to drop makes no request).
    Only tidiness: readers take the highest generation, so one re-created
    late by a delayed write is harmless, and goes at the next pass.
    """
    top = _order(current)
    if top not in generations:  # a boundary only in the pre-generation object stays there until an advance
        return
    lower = [boundary_key(*g) for g in generations if g < top]
    if lower or legacy:
        store.delete([GC_BOUNDARY_KEY, *lower] if legacy else lower)


def _order(boundary: GCBoundary) -> tuple[int, int]:
    return boundary.version, boundary.step
