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
"""

from __future__ import annotations

from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._json import MAX_METADATA_BYTES, Fields, dump_json, load_json
from torch_tgb.manifest.records import FORMAT, ManifestState

__all__ = ["MAX_PARTS", "PART_BYTES", "WHOLE_BYTES", "join_parts", "parts_of", "split_snapshot"]

#: a snapshot up to this many bytes of JSON is one object (the most a reader accepts)
WHOLE_BYTES = MAX_METADATA_BYTES
#: a part holds producers up to this many bytes of JSON (one producer is at most ~33 KiB), half a reader's limit
PART_BYTES = 4 * 1024 * 1024
#: most parts a header may name (65536 producers at the state limit need ~530)
MAX_PARTS = 4096


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


def parts_of(header: dict[str, Any], *, what: str) -> tuple[int, int]:
    """``(parts, producers in them)`` as the header names them (``(0, 0)``: one whole object); popped from it."""
    if "parts" not in header:
        return 0, 0
    count, total = header.pop("parts"), header.pop("parts_producers", None)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTS:
        raise ManifestError(f"{what}: field 'parts' must be an integer in 1..{MAX_PARTS}, got {count!r}")
    if isinstance(total, bool) or not isinstance(total, int) or total < count:
        raise ManifestError(f"{what}: field 'parts_producers' must be an integer >= parts, got {total!r}")
    if header.get("producers") != {}:
        raise ManifestError(f"{what}: a snapshot in parts keeps its producers in the parts, not the header")
    return count, total


def join_parts(
    header: dict[str, Any], parts: list[bytes], *, version: int, producers_in_parts: int, what: str
) -> dict[str, Any]:
    """The whole snapshot's JSON object: ``header`` with the producers of ``parts`` (in order, each checked)."""
    producers: dict[str, Any] = {}
    for k, data in enumerate(parts):
        where = f"{what} part {k}"
        f = Fields(load_json(data, what=where), what=where)
        if f.string("format") != FORMAT:
            raise ManifestError(f"{where}: unknown format")
        if f.integer("version") != version or f.integer("part") != k:
            raise ManifestError(f"{where}: names version={f.integer('version')} part={f.integer('part')}")
        group = f.mapping("producers")
        f.done()
        if set(group) & set(producers):
            raise ManifestError(f"{where}: producers {sorted(set(group) & set(producers))} appear in two parts")
        producers.update(group)
    if len(producers) != producers_in_parts:
        raise ManifestError(
            f"{what}: its parts hold {len(producers)} producers, the snapshot names {producers_in_parts}"
        )
    return {**header, "producers": producers}
