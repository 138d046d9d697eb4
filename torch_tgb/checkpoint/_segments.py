"""Whether a segment object whose TGBs a pass reclaims still holds a TGB at or above the GC boundary.

A one-TGB object is deletable once its step is below the boundary. A
segment holds consecutive offsets ``a, a+1, ...`` of one producer
incarnation, committed in order, perhaps over several versions (a commit
policy that caps entries, a segment split by a version). The TGBs a pass
reclaims tell the segment's producer ``p`` and the last reclaimed offset
``o``; the first entry of ``p`` after ``o`` (at or above the boundary)
decides: it names the segment (keep it) or another object (the segment
holds nothing more that will ever be committed: offsets are committed once,
in order, so the rest of it, if any, belongs to an incarnation that moved
on). So the versions from the boundary on are read only until every such
segment is decided, usually a version or two, never the whole live log; one
still undecided at the head is kept while its producer may commit the rest:
not once the namespace is sealed, or the incarnation that wrote it closed
(``closed``/``done``: it committed everything it wrote) or was superseded by
a newer epoch (which writes objects of its own).
"""

from __future__ import annotations

from collections.abc import Iterable

from torch_tgb.manifest.keys import parse_object_name
from torch_tgb.manifest.manifest import Manifest
from torch_tgb.manifest.records import GCBoundary, ManifestState, TGBEntry

__all__ = ["is_segment", "still_named"]

#: versions read ahead at once while deciding
_WINDOW = 16


def is_segment(entry: TGBEntry) -> bool:
    """Whether the entry's object may hold other TGBs than this one."""
    return entry.start != 0 or (entry.object_size is not None and entry.object_size != entry.size)


def still_named(manifest: Manifest, boundary: GCBoundary, head: ManifestState,
                reclaimed: Iterable[TGBEntry]) -> set[str]:
    """The keys among ``reclaimed``'s segment objects that an entry at or above ``boundary`` names (or may)."""
    head_version = head.version
    pending: dict[str, dict[str, int]] = {}  # producer -> {segment key: last reclaimed offset}
    for e in reclaimed:
        if is_segment(e):
            group = pending.setdefault(e.producer, {})
            group[e.key] = max(e.offset, group.get(e.key, e.offset))
    kept: set[str] = set()
    number = max(1, boundary.version)
    while pending and number <= head_version:
        window = list(range(number, min(head_version, number + _WINDOW - 1) + 1))
        manifest.prefetch(window)
        for n in window:
            version = manifest.read_version(n)
            skip = max(0, boundary.step - version.first_step) if n == boundary.version else 0
            for e in version.entries[skip:]:
                keys = pending.get(e.producer)
                if not keys:
                    continue
                for key, offset in list(keys.items()):
                    if e.key == key:
                        kept.add(key)  # a TGB of it is at or above the boundary
                        del keys[key]
                    elif e.offset > offset:
                        del keys[key]  # the producer went on in another object
                if not keys:
                    del pending[e.producer]
            if not pending:
                break
        number = window[-1] + 1
    return kept | {key for keys in pending.values() for key in keys if may_name_more(head, key)}


def may_name_more(head: ManifestState, key: str) -> bool:
    """Whether a later commit may still name segment ``key``: its incarnation is the producer's newest, still open."""
    if head.sealed:
        return False
    name = parse_object_name(key)
    producer = None if name is None else head.producers.get(name.producer)
    if name is None or producer is None:
        return True  # not a key this package names the usual way: kept (nothing is deleted on a guess)
    return name.epoch == producer.epoch and producer.status == "open"
