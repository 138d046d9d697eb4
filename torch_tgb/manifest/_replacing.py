"""How a reader applies replacement entries (``_replaced.py``) to the steps it reads.

A :class:`ReplacementView` belongs to one ``Manifest``. Each call applies the
replacements named by one version, the *view version*: by default the
newest version the manifest read for that call, or the version the reader
pinned (:meth:`ReplacementView.pin`), so that all the steps of one iteration
are read under the same replacements on every rank and worker
(docs/provenance.md, *What a reader sees*). A bucket object is read once per
reference (immutable) and kept in a small LRU.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from torch_tgb.errors import ObjectNotFound
from torch_tgb.manifest import _reads
from torch_tgb.manifest._entry import TGBEntry
from torch_tgb.manifest._replaced import BUCKET_STEPS, ReplacedBucket, ReplacedRef, replaced_key
from torch_tgb.storage import ObjectStore

__all__ = ["ReplacementView"]

_CACHED_BUCKETS = 8


class ReplacementView:
    """The replacements a reader applies, read through ``store`` (thread-safe)."""

    def __init__(self, store: ObjectStore, *, where: str) -> None:
        self.store = store
        self.where = where
        self._lock = threading.Lock()
        self._buckets: OrderedDict[tuple[int, str], ReplacedBucket] = OrderedDict()
        self.pinned: int | None = None  # the view version, when pinned
        self._pinned_ref: ReplacedRef | None = None

    def pin(self, version: int, ref: ReplacedRef | None) -> None:
        """Apply the replacements ``ref`` of ``version`` from now on, whatever newer versions name."""
        self.pinned, self._pinned_ref = version, ref

    def ref(self, newest: Callable[[], ReplacedRef | None]) -> ReplacedRef | None:
        """The replacements to apply: the pinned ones, else those of the newest version read (``newest()``)."""
        return self._pinned_ref if self.pinned is not None else newest()

    def bucket(self, ref: ReplacedRef, bucket: int) -> ReplacedBucket:
        """Bucket ``bucket`` of ``ref`` (empty if it names none), read once per object."""
        name = ref.ref(bucket)
        if name is None:
            return ReplacedBucket.empty(bucket)
        with self._lock:
            found = self._buckets.get((bucket, name))
            if found is not None:
                self._buckets.move_to_end((bucket, name))
                return found
        key = replaced_key(bucket, name)
        try:
            data = _reads.read_bounded(self.store, key, where=self.where, what=f"replacements {key}")
        except ObjectNotFound as e:
            raise ObjectNotFound(f"{self.where}{key}: the replacements named by version={ref.version} are missing "
                                 "(deleted behind the namespace's back?)") from e
        found = ReplacedBucket.decode(data, bucket=bucket, what=f"{self.where}{key}")
        with self._lock:
            self._buckets[(bucket, name)] = found
            while len(self._buckets) > _CACHED_BUCKETS:
                self._buckets.popitem(last=False)
        return found

    def apply(self, ref: ReplacedRef | None, first_step: int, entries: Sequence[TGBEntry]) -> list[TGBEntry]:
        """``entries`` of steps ``first_step ..`` with the replacements of ``ref`` in effect."""
        out = list(entries)
        if ref is None or not out:
            return out
        stop = first_step + len(out)
        for b in range(first_step // BUCKET_STEPS, (stop - 1) // BUCKET_STEPS + 1):
            if ref.ref(b) is None:
                continue
            bucket = self.bucket(ref, b)
            lo, hi = bucket.steps.searchsorted(first_step), bucket.steps.searchsorted(stop)
            for i in range(int(lo), int(hi)):
                out[int(bucket.steps[i]) - first_step] = bucket.entries[i]
        return out
