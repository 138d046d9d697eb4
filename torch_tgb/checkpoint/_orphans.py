"""Which uncommitted TGB objects can never be committed: the Reclaimer's deletion rule.

An object's key names the producer incarnation that wrote it and the offset
it holds (``data/<producer>/e<epoch>-o<offset>-<rand>.tgb``). Given a
manifest state ``S`` read *after* the object was listed, an object that no
version up to ``S.version`` names can still be committed only if

- ``S`` is not sealed (nothing follows a sealed version),
- ``epoch >= S.producers[producer].epoch`` (a lower epoch is fenced: its
  committer must read the newer epoch — in a version or in the boundary's
  snapshot — before any create can count, and then stops), and
- ``offset >= S.producers[producer].next_offset`` (every committed offset
  below ``next_offset`` is held by an entry already in the log; a rebase
  drops the offset and ``fold`` refuses it again).

Each condition is monotone in the log (sealing is final, epochs and
``next_offset`` never go back), so once it holds for ``S`` it holds for every
later state: the decision never depends on a clock. The full argument is in
docs/protocol.md, *Reclaiming uncommitted objects*.

A *partial write* (a temp file or an open multipart upload that a writer
killed mid-segment left: ``ObjectStore.list_partial``) names the key it was
to become, so the same fields judge it (:func:`partial_fate`): it is dead
when that object would be, and also once its incarnation committed its end
mark (``closed`` or ``done``): a producer publishes every segment before
that commit and writes nothing after it, so what it left unfinished is
never finished. Deleting a dead one cannot hurt a zombie that still writes
it: that incarnation can no longer commit anything.
"""

from __future__ import annotations

import enum

from torch_tgb.manifest.keys import parse_object_name
from torch_tgb.manifest.records import DATA_PREFIX, ManifestState
from torch_tgb.storage import PartialObject

__all__ = ["Fate", "fate_of", "partial_fate", "partial_is_live"]


class Fate(enum.Enum):
    DEAD = "dead"  # can never be committed: deletable (once past the grace period)
    LIVE = "live"  # its incarnation may still commit it: kept whatever its age
    FOREIGN = "foreign"  # a key no producer writes: deleted by age alone


def fate_of(state: ManifestState, key: str) -> Fate:
    """The fate of an object under ``data/`` that no version up to ``state.version`` names."""
    if state.sealed:
        return Fate.DEAD
    name = parse_object_name(key)
    if name is None:
        return Fate.FOREIGN
    producer = state.producers.get(name.producer)
    if producer is None:
        # Not in the log yet: registered, its first commit still to come (or pending): keep it.
        return Fate.LIVE
    if name.epoch < producer.epoch or name.offset < producer.next_offset:
        return Fate.DEAD
    return Fate.LIVE


def partial_fate(state: ManifestState, key: str | None) -> Fate:
    """The fate of a partial write under ``data/`` that was to become ``key`` (``None``: unknown, judged by age)."""
    if key is None:
        return Fate.FOREIGN
    fate = fate_of(state, key)
    if fate is not Fate.LIVE:
        return fate
    name = parse_object_name(key)
    producer = None if name is None else state.producers.get(name.producer)
    if name is not None and producer is not None and name.epoch == producer.epoch and producer.status != "open":
        return Fate.DEAD  # its incarnation closed: every segment it meant to commit was published before
    return Fate.LIVE


def partial_is_live(state: ManifestState, partial: PartialObject) -> bool:
    """Whether a running producer may still finish ``partial`` (then it is kept whatever its age).

    Only a segment write under ``data/`` whose key names a live incarnation
    is; everything else goes once past its age (the grace period; at least
    the Reclaimer's ``METADATA_PARTIAL_AGE`` outside ``data/``).
    """
    return (partial.key or partial.name).startswith(DATA_PREFIX) and partial_fate(state, partial.key) is Fate.LIVE
