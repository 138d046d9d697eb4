"""The Reclaimer's part in excisions: objects that replacement entries superseded, and replacement objects.

An excision (docs/provenance.md) names in its replacements the objects it
superseded, with when and up to which step they served
(``manifest/_replaced.py``). Such an object is deleted once nobody can read
it any more:

- no live checkpoint may resume onto it: every live watermark either
  applies replacements of a view at or after the excision (a reader that
  resumes from it opens with a newer view anyway, but one still *running*
  with an older view reads the old objects: its watermark says so), or
  resumes past the last step the object served;
- a reader that records no watermark (an evaluation job) gets
  ``grace_period`` seconds from the excision to finish the iteration it
  started before it (it then fails loud on a missing object, never reads
  something else).

Replacement objects (``data/tgb-excise/...``) are named by no version's
entries: the sweep keeps the ones in effect (:func:`replacement_keys`), and
one whose steps are all below the GC boundary goes with its steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch_tgb.manifest.manifest import Manifest
from torch_tgb.manifest.records import GCBoundary, ManifestState
from torch_tgb.manifest.watermarks import Watermark

__all__ = ["doomed_replacements", "doomed_superseded", "replacement_keys"]


def _buckets(manifest: Manifest, head: ManifestState) -> list:
    replaced = head.replaced
    if replaced is None:
        return []
    return [manifest.replacements.bucket(replaced, b) for b, _ in replaced.buckets]


def replacement_keys(manifest: Manifest, head: ManifestState, boundary: GCBoundary) -> set[str]:
    """Keys of the replacement entries in effect at ``head`` for steps at or above the boundary step."""
    return {e.key for b in _buckets(manifest, head) for s, e in zip(b.steps.tolist(), b.entries)
            if s >= boundary.step}


def doomed_replacements(manifest: Manifest, head: ManifestState, boundary: GCBoundary) -> set[str]:
    """Replacement objects every step of which is below the boundary step (reclaimed with their steps)."""
    below: set[str] = set()
    above: set[str] = set()
    for b in _buckets(manifest, head):
        for s, e in zip(b.steps.tolist(), b.entries):
            (below if s < boundary.step else above).add(e.key)
    return below - above


def doomed_superseded(manifest: Manifest, head: ManifestState, live: Sequence[Watermark], *, now: float,
                      grace_period: float, in_effect: set[str]) -> dict[str, int]:
    """Superseded objects nobody can read any more (key -> the excision version that superseded it)."""
    out: dict[str, int] = {}
    for bucket in _buckets(manifest, head):
        for gone in bucket.superseded:
            if gone.key in in_effect or now < gone.time + grace_period:
                continue
            needed = any((m.replaced < gone.version) and m.step <= gone.last_step for m in live)
            if not needed:
                out[gone.key] = gone.version
    return out
