"""Reading the manifest log: discovery, state, step lookup, snapshots, GC boundary.

A :class:`Manifest` is a client-side view of one namespace's log. Versions are
immutable once created, so parsed versions are cached (LRU); everything else
(the newest version, the hint, the boundary) is re-read when it matters.

The class is assembled from three parts, one concept each:

- ``_log.py`` (:class:`LogReader`): the cache and every read of the log's
  objects; probing for the newest version; the state at a version (newest
  usable snapshot + replay) and ``head()``.
- ``_steps.py`` (:class:`StepLookup`): step -> version, ``entry``, ``entries``.
- ``_maintenance.py`` (:class:`LogMaintenance`): writing snapshots, advancing
  the GC boundary, deleting versions below it (committer and Reclaimer).

Cost, with n committed versions and K = ``snapshot_every``:

- ``latest_version()`` cold: boundary + hint + O(log gap) existence probes
  (the gap from the newest snapshot is < 2K unless snapshots stall);
  warm and idle: one probe plus one boundary read.
- ``entry(step)`` cold: O(log n) version reads (binary search on
  ``first_step`` over version numbers).
- ``head()`` cold: one snapshot plus < 2K versions replayed; warm: only the
  versions that are new.
"""

from __future__ import annotations

from torch_tgb.manifest._maintenance import LogMaintenance
from torch_tgb.manifest._steps import StepLookup

__all__ = ["Manifest"]


class Manifest(StepLookup, LogMaintenance):
    """The manifest log of one namespace, read through ``store``. Thread-safe."""
