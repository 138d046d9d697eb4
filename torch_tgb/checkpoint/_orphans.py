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
"""

from __future__ import annotations

import enum

from torch_tgb.manifest.keys import parse_object_name
from torch_tgb.manifest.records import ManifestState

__all__ = ["Fate", "fate_of"]


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
        # Producers write objects only after their epoch bump is committed, and the
        # object was listed before ``state`` was read: unexpected, so keep it.
        return Fate.LIVE
    if name.epoch < producer.epoch or name.offset < producer.next_offset:
        return Fate.DEAD
    return Fate.LIVE
