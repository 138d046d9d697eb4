"""Which steps an object serves: what an excision must rewrite to supersede the object whole.

A one-TGB object serves one step. A producer's segment holds consecutive
offsets of that producer from the one its key names
(``data/<p>/e<epoch>-o<first offset>-<rand>.tgb``), committed in order,
perhaps over several versions interleaved with other producers': the
versions are read backward from the step until that producer's first
offset is found, and forward until it has moved on to another object. An
object an excision wrote serves the steps whose replacements name it.
"""

from __future__ import annotations

from torch_tgb.manifest import Manifest, TGBEntry
from torch_tgb.manifest.keys import parse_object_name

__all__ = ["object_steps"]


def object_steps(manifest: Manifest, entry: TGBEntry, step: int, *, head: int, boundary_step: int) -> list[int]:
    """Steps at or above ``boundary_step`` whose original or replacement entry names ``entry``'s object."""
    single = entry.start == 0 and (entry.object_size is None or entry.object_size == entry.size)
    if single:
        return [step]
    name = parse_object_name(entry.key)
    if name is None or name.producer != entry.producer:
        return _replaced_steps(manifest, entry.key, head)
    found = [step]
    version = manifest.version_of_step(step)
    # backward: to the producer's first offset in the object
    number, first = version.number, entry.offset
    while first > name.offset and number >= 1:
        v = manifest.try_read_version(number)
        if v is None:
            break  # reclaimed: those steps are below the GC boundary
        for i, e in enumerate(v.entries):
            if e.key == entry.key and v.first_step + i < step:
                found.append(v.first_step + i)
                first = min(first, e.offset)
        number -= 1
    # forward: until the producer commits an offset from another object
    number, moved = version.number, False
    while not moved and number <= head:
        v = manifest.read_version(number)
        for i, e in enumerate(v.entries):
            if e.producer != entry.producer or v.first_step + i <= step:
                continue
            if e.key != entry.key:
                moved = True
                break
            found.append(v.first_step + i)
        number += 1
    return sorted(s for s in set(found) if s >= boundary_step)


def _replaced_steps(manifest: Manifest, key: str, head: int) -> list[int]:
    """Steps whose replacement in effect at ``head`` names ``key``."""
    replaced = manifest.read_version(head).replaced
    if replaced is None:
        return []
    out: list[int] = []
    for b, _ in replaced.buckets:
        bucket = manifest.replacements.bucket(replaced, b)
        out.extend(int(s) for s, e in zip(bucket.steps.tolist(), bucket.entries) if e.key == key)
    return out
