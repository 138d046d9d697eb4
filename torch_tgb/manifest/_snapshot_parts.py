"""A snapshot too large for one metadata object: a header and parts, pure functions of the state and the bytes.

A snapshot holds the state of every producer, pipeline state included (up
to 32 KiB each, for up to 65536 shards of a job), so it can outgrow the
8 MiB a reader accepts for one object. Then its producers are split, in id
order, over *part* objects of at most :data:`PART_BYTES` each
(``_tgb/snapshots/<version>.part<k>.json``, ``k = 0 .. n-1``), and the
snapshot object (the *header*, written after its parts) holds everything
else, an empty ``producers``, ``"parts": n`` and ``"parts_producers"``, the
number of producers in all parts: a join that finds a producer twice, or
fewer than that, is refused (parts of two writers that split differently
never pass for one snapshot). A snapshot that fits in one object is written
whole, as always (docs/protocol.md, *Snapshot*).

What a reader fetches is bounded by what the header implies, since a header
is one small object anyone with write access can plant: every part but the
last holds more than ``part_bytes - MAX_PRODUCER_JSON`` bytes of producers
(the next one did not fit), so ``parts_producers`` producers fill at most
:func:`max_parts` parts at the writers' part size (with a margin for writers
whose parts are down to a quarter of :data:`PART_BYTES`). A header naming
more is refused before any part is read. Parts are then read
:data:`PART_WINDOW` at a time and each is checked as it arrives
(:class:`PartsJoin`: its index, no producer twice, no more producers than
named, no more bytes than its producers can take), so a header consistent
with garbage parts costs one window, not ``parts`` objects of 8 MiB.

Every refusal is a :class:`RefusedParts`: the reader treats the snapshot as
missing (a warning names it) and starts from an older snapshot plus a replay
of the log, as it does when a part is gone. A rolling upgrade to another
part size, whose writers race on one snapshot, is then slower, never an
outage.
"""

from __future__ import annotations

from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._checks import MAX_FORMAT1_STATE_BYTES
from torch_tgb.manifest._json import MAX_METADATA_BYTES, Fields, dump_json, load_json
from torch_tgb.manifest.records import FORMAT, ManifestState

__all__ = [
    "MAX_PARTS",
    "MAX_PRODUCER_JSON",
    "PART_BYTES",
    "PART_WINDOW",
    "WHOLE_BYTES",
    "PartsJoin",
    "RefusedParts",
    "join_parts",
    "max_parts",
    "parts_of",
    "split_snapshot",
]

#: a snapshot up to this many bytes of JSON is one object (the most a reader accepts)
WHOLE_BYTES = MAX_METADATA_BYTES
#: a part holds producers up to this many bytes of JSON (one producer is at most ~33 KiB), half a reader's limit
PART_BYTES = 4 * 1024 * 1024
#: most parts a header may name (65536 producers at the state limit need ~530)
MAX_PARTS = 4096
#: most bytes one producer takes in a part, ``"<id>":{...}`` and its comma: a state of at most
#: MAX_FORMAT1_STATE_BYTES, an id of at most 128 characters, epoch, offset, time and status (under 300 bytes):
#: snapshots in parts hold format-1 states (format-2 snapshots name the producers' table and are never in parts)
MAX_PRODUCER_JSON = MAX_FORMAT1_STATE_BYTES + 1024
#: bytes of a part besides its producers: ``{"format":..,"part":k,"producers":{},"version":v}``
_PART_OVERHEAD = 256
#: parts a reader fetches at once (at most 8 MiB each) before checking them
PART_WINDOW = 8


class RefusedParts(ManifestError):
    """A snapshot's header and parts do not make one snapshot: read as a missing snapshot (an older one + replay)."""


def split_snapshot(
    state: ManifestState, *, whole_bytes: int | None = None, part_bytes: int | None = None
) -> tuple[bytes, list[bytes]]:
    """``(header, parts)``: the snapshot's objects; no parts if its JSON fits in ``whole_bytes`` (:data:`WHOLE_BYTES`).

    Each part holds whole producers, up to ``part_bytes`` (:data:`PART_BYTES`)
    of them or one producer if it alone is larger.
    """
    whole_bytes = WHOLE_BYTES if whole_bytes is None else whole_bytes
    part_bytes = PART_BYTES if part_bytes is None else part_bytes
    whole = state.encode()
    if len(whole) <= whole_bytes:
        return whole, []
    groups: list[dict[str, Any]] = [{}]
    size = 0
    for producer_id, producer in sorted(state.producers.items()):
        obj = producer.to_json()
        n = len(dump_json({producer_id: obj}))
        if groups[-1] and size + n > part_bytes:
            groups.append({})
            size = 0
        groups[-1][producer_id] = obj
        size += n
    header = {**state.to_json(), "producers": {}, "parts": len(groups), "parts_producers": len(state.producers)}
    parts = [dump_json({"format": FORMAT, "version": state.version, "part": k, "producers": group})
             for k, group in enumerate(groups)]
    return dump_json(header), parts


def max_parts(producers: int, part_bytes: int | None = None) -> int:
    """The most parts a writer splitting ``producers`` producers at ``part_bytes`` (or a quarter of it) makes.

    Every part but the last is filled past ``part_bytes - MAX_PRODUCER_JSON``
    (:func:`split_snapshot` closes a part only when the next producer does not
    fit), and none is empty. The quarter is a margin for writers of another
    version with smaller parts (a rolling upgrade); parts of one producer each
    (``part_bytes`` at most one producer's size) give ``producers``.
    """
    floor = (PART_BYTES if part_bytes is None else part_bytes) // 4
    if floor <= MAX_PRODUCER_JSON:
        return producers
    fill = floor - MAX_PRODUCER_JSON
    return min(producers, 1 + -(-producers * MAX_PRODUCER_JSON // fill))


def parts_of(header: dict[str, Any], *, what: str, part_bytes: int | None = None) -> tuple[int, int]:
    """``(parts, producers in them)`` as the header names them (``(0, 0)``: one whole object); popped from it.

    :class:`RefusedParts` for a count no writer at ``part_bytes``
    (:data:`PART_BYTES`) makes (:func:`max_parts`), before any part is read.
    """
    part_bytes = PART_BYTES if part_bytes is None else part_bytes
    if "parts" not in header:
        return 0, 0
    count, total = header.pop("parts"), header.pop("parts_producers", None)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTS:
        raise RefusedParts(f"{what}: field 'parts' must be an integer in 1..{MAX_PARTS}, got {count!r}")
    if isinstance(total, bool) or not isinstance(total, int) or total < count:
        raise RefusedParts(f"{what}: field 'parts_producers' must be an integer >= parts, got {total!r}")
    if count > max_parts(total, part_bytes):
        raise RefusedParts(
            f"{what}: names {count} parts for {total} producers; writers splitting them at {part_bytes // 4} to "
            f"{part_bytes} bytes a part make at most {max_parts(total, part_bytes)}"
        )
    if header.get("producers") != {}:
        raise RefusedParts(f"{what}: a snapshot in parts keeps its producers in the parts, not the header")
    return count, total


class PartsJoin:
    """Joins a snapshot's parts as they arrive, in order, checking each before the next is fetched.

    :meth:`add` raises :class:`RefusedParts` at the first part that cannot
    belong to the snapshot the header names; :meth:`result` once all are in.
    """

    def __init__(self, header: dict[str, Any], *, version: int, count: int, producers: int, what: str) -> None:
        self.header, self.version, self.count, self.producers_named, self.what = header, version, count, producers, what
        self.producers: dict[str, Any] = {}
        self.added = 0

    def add(self, data: bytes | memoryview) -> None:
        """Part number ``self.added``: parsed, checked against the header and the parts before it, kept."""
        k = self.added
        where = f"{self.what} part {k}"
        try:
            f = Fields(load_json(bytes(data), what=where), what=where)
            fields = f.string("format"), f.integer("version"), f.integer("part")
            group = f.mapping("producers")
            f.done()
        except ManifestError as e:
            raise RefusedParts(str(e)) from e
        if fields[0] != FORMAT:
            raise RefusedParts(f"{where}: unknown format")
        if fields[1:] != (self.version, k):
            raise RefusedParts(f"{where}: names version={fields[1]} part={fields[2]}")
        if not group:
            raise RefusedParts(f"{where}: holds no producers")
        if len(data) > len(group) * MAX_PRODUCER_JSON + _PART_OVERHEAD:
            raise RefusedParts(f"{where}: {len(data)} bytes for {len(group)} producers; a writer writes at most "
                               f"{MAX_PRODUCER_JSON} bytes a producer")
        if set(group) & set(self.producers):
            raise RefusedParts(f"{where}: producers {sorted(set(group) & set(self.producers))} appear in two parts")
        self.producers.update(group)
        self.added += 1
        left = self.count - self.added
        if len(self.producers) + left > self.producers_named:
            raise RefusedParts(
                f"{self.what}: its parts 0..{k} hold {len(self.producers)} producers and {left} more parts follow, "
                f"the snapshot names {self.producers_named}"
            )

    def result(self) -> dict[str, Any]:
        """The whole snapshot's JSON object: the header with the producers of every part."""
        if self.added != self.count:
            raise RefusedParts(f"{self.what}: {self.added} of its {self.count} parts could be read")
        if len(self.producers) != self.producers_named:
            raise RefusedParts(f"{self.what}: its parts hold {len(self.producers)} producers, "
                               f"the snapshot names {self.producers_named}")
        return {**self.header, "producers": self.producers}


def join_parts(
    header: dict[str, Any], parts: list[bytes], *, version: int, producers_in_parts: int, what: str
) -> dict[str, Any]:
    """The whole snapshot's JSON object: ``header`` with the producers of ``parts`` (in order, each checked)."""
    join = PartsJoin(header, version=version, count=len(parts), producers=producers_in_parts, what=what)
    for data in parts:
        join.add(data)
    return join.result()
