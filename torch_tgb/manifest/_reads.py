"""The log's metadata objects besides versions: bounded reads of the hint, snapshots and boundary, LISTs.

Also the one write of a snapshot and its hint. Functions of a store and
the namespace's name for messages (``where``);
:class:`~torch_tgb.manifest.Manifest` keeps what is cached between calls.
Every object is read with a range read of at most the metadata limit (+1
byte to detect excess), so an object planted to exhaust memory is refused
after reading the limit, not after reading all of it.
"""

from __future__ import annotations

import logging
from typing import Any

from torch_tgb.errors import ManifestError, ObjectNotFound
from torch_tgb.manifest._checks import MAX_STATE_BYTES
from torch_tgb.manifest._json import MAX_DEPTH, MAX_METADATA_BYTES, Fields, dump_json, load_json
from torch_tgb.manifest._snapshot_parts import PART_WINDOW, PartsJoin, RefusedParts, parts_of, split_snapshot
from torch_tgb.manifest.keys import (
    GC_BOUNDARY_KEY,
    GC_BOUNDARY_PREFIX,
    LOG_PREFIX,
    SNAPSHOT_HINT_KEY,
    SNAPSHOT_PREFIX,
    KeyLayout,
    boundary_of,
)
from torch_tgb.manifest.records import EMPTY_STATE, FORMAT, GCBoundary, ManifestState
from torch_tgb.storage import ObjectStore, RangeRequest

__all__ = [
    "MAX_METADATA_BYTES",
    "Reclaimed",
    "base_state",
    "boundary_generations",
    "put_hint",
    "put_snapshot",
    "read_bounded",
    "read_hint",
    "read_snapshot",
    "read_state_object",
    "snapshot_keys_below",
    "within_limit",
    "stored_boundary",
    "version_keys_below",
]

log = logging.getLogger(__name__)


class Reclaimed(ManifestError):
    """The versions needed were reclaimed (possibly while we read): callers may retry from the new boundary."""


def read_bounded(store: ObjectStore, key: str, *, where: str, what: str | None = None) -> bytes:
    """The bytes of metadata object ``key``; :class:`ManifestError` past the metadata limit."""
    return within_limit(store.get_range(key, 0, MAX_METADATA_BYTES + 1), f"{where}{what or key}")


def within_limit(data: bytes, what: str) -> bytes:
    """``data``, read as ``[0, limit + 1)``: :class:`ManifestError` if it is longer than the metadata limit."""
    if len(data) > MAX_METADATA_BYTES:
        raise ManifestError(f"{what}: more than {MAX_METADATA_BYTES} bytes exceeds the metadata limit")
    return data


def read_hint(store: ObjectStore, *, where: str) -> int:
    """The version the snapshot hint names (0 without a hint): a starting point only."""
    try:
        data = read_bounded(store, SNAPSHOT_HINT_KEY, where=where)
    except ObjectNotFound:
        return 0
    what = f"{where}{SNAPSHOT_HINT_KEY}"
    f = Fields(load_json(data, what=what), what=what)
    if f.string("format") != FORMAT:
        raise ManifestError(f"{what}: unknown format")
    number = f.integer("version")
    f.done()
    return number


def read_snapshot(store: ObjectStore, number: int, keys: KeyLayout, *, where: str) -> ManifestState | None:
    """The snapshot of version ``number`` (its parts joined, if any), or ``None`` if none was written.

    A part that is gone (the Reclaimer deletes a snapshot below the GC
    boundary part by part) makes the snapshot gone too; so do parts that do
    not join into the snapshot their header names (two writers that split
    it differently, a planted header): a warning names it, and the caller
    starts from an older snapshot and replays the log, as for a missing one.
    """
    key = keys.snapshot_key(number)
    try:
        data = read_bounded(store, key, where=where)
    except ObjectNotFound:
        return None
    what = f"{where}{key}"
    obj = load_json(data, what=what)
    try:
        count, producers = parts_of(obj, what=what)
        state = _joined(store, obj, number, count, producers, keys, what=what) if count else None
    except ObjectNotFound:
        return None
    except RefusedParts as e:
        log.warning("%s; reading it as a missing snapshot: the state comes from an older snapshot and a replay "
                    "of the log (writing the snapshot of this version again repairs it)", e)
        return None
    if state is None:
        state = ManifestState.from_json(obj, what=what)
    if state.version != number:
        raise ManifestError(f"{what}: snapshot says version={state.version}")
    return state


def _joined(store: ObjectStore, header: dict[str, Any], number: int, count: int, producers: int, keys: KeyLayout,
            *, what: str) -> ManifestState:
    """The state of ``header`` and its ``count`` parts, fetched ``PART_WINDOW`` at a time and checked as they come.

    :class:`RefusedParts` for parts that do not make that snapshot (anything
    wrong in them, the producers' fields included), ``ObjectNotFound`` for a
    part that is gone.
    """
    join = PartsJoin(header, version=number, count=count, producers=producers, what=what)
    try:
        for first in range(0, count, PART_WINDOW):
            names = [keys.snapshot_part_key(number, k) for k in range(first, min(first + PART_WINDOW, count))]
            got = store.get_ranges([RangeRequest(k, 0, MAX_METADATA_BYTES + 1) for k in names])  # failures raise
            for k, part in zip(range(first, count), got):
                assert isinstance(part, bytes)  # without continue_on_error a failure raises
                join.add(within_limit(part, f"{what} part {k}"))
        return ManifestState.from_json(join.result(), what=what)
    except RefusedParts:
        raise
    except ManifestError as e:
        raise RefusedParts(str(e)) from e


def put_snapshot(store: ObjectStore, state: ManifestState, keys: KeyLayout, *, where: str) -> None:
    """Write the snapshot of ``state.version`` (idempotent) and move the hint forward to it.

    A snapshot too large for one object goes in parts, written before the
    header that names them: a reader that finds the header finds its parts.
    """
    header, parts = split_snapshot(state)
    for k, part in enumerate(parts):
        store.put(keys.snapshot_part_key(state.version, k), part)
    store.put(keys.snapshot_key(state.version), header)
    if read_hint(store, where=where) < state.version:
        put_hint(store, state.version)


def put_hint(store: ObjectStore, version: int) -> None:
    """Point the hint at ``version``. Racing hint writers may move it back a little: it is only a starting point."""
    store.put(SNAPSHOT_HINT_KEY, dump_json({"format": FORMAT, "version": version}))


def base_state(store: ObjectStore, at_most: int, boundary: GCBoundary, hint: int, keys: KeyLayout, *,
               where: str) -> ManifestState:
    """The newest snapshot in versions ``boundary.version .. at_most`` that a replay may start from.

    The hinted snapshot first, then the boundary's, then a LIST of
    snapshots; the empty state only for a namespace never reclaimed (the
    caller has checked that ``at_most`` is not below the boundary).
    """
    for candidate in (hint, boundary.version):
        if boundary.version <= candidate <= at_most and candidate > 0:
            state = read_snapshot(store, candidate, keys, where=where)
            if state is not None:
                return state
    numbers = [s[0] for k in store.list(SNAPSHOT_PREFIX) if (s := keys.snapshot_of(k)) is not None and s[1] is None]
    for candidate in sorted((n for n in numbers if boundary.version <= n <= at_most), reverse=True):
        state = read_snapshot(store, candidate, keys, where=where)
        if state is not None:
            return state
    if boundary.version > 0:
        raise ManifestError(f"{where}snapshot of GC boundary version={boundary.version} is missing")
    return EMPTY_STATE


def boundary_generations(store: ObjectStore) -> list[tuple[int, int]]:
    """``(version, step)`` of every boundary generation on storage, lowest first (one LIST)."""
    return sorted(g for g in map(boundary_of, store.list(GC_BOUNDARY_PREFIX)) if g is not None)


def stored_boundary(store: ObjectStore, generations: list[tuple[int, int]], *, where: str) -> GCBoundary:
    """The highest of ``generations``; without any, the pre-generation ``_tgb/gc_boundary.json`` (or none)."""
    if generations:
        return GCBoundary(*generations[-1])
    try:
        data = read_bounded(store, GC_BOUNDARY_KEY, where=where)
    except ObjectNotFound:
        return GCBoundary()
    return GCBoundary.decode(data, what=f"{where}{GC_BOUNDARY_KEY}")


def version_keys_below(store: ObjectStore, version: int, keys: KeyLayout) -> list[str]:
    """Log objects strictly below ``version`` (one LIST of every prefix: the spread ones lie under it)."""
    return [key for key in store.list(LOG_PREFIX) if (number := keys.version_of(key)) is not None and number < version]


def snapshot_keys_below(store: ObjectStore, version: int, keys: KeyLayout) -> list[str]:
    """Snapshots strictly below ``version``, their parts included (one LIST of every prefix)."""
    return [key for key in store.list(SNAPSHOT_PREFIX) if (s := keys.snapshot_of(key)) is not None and s[0] < version]


def read_state_object(store: ObjectStore, key: str, *, where: str) -> dict[str, object]:
    """A producer's pipeline state kept in its own object: JSON of at most ``MAX_STATE_BYTES``."""
    what = f"{where}{key}"
    data = store.get_range(key, 0, MAX_STATE_BYTES + 1)
    if len(data) > MAX_STATE_BYTES:
        raise ManifestError(f"{what}: more than {MAX_STATE_BYTES} bytes exceeds the pipeline state limit")
    return load_json(data, what=what, max_bytes=MAX_STATE_BYTES, max_depth=MAX_DEPTH - 1)
