"""Checks of what a producer hands the log: its id (a path segment of object keys), its pipeline state, metadata.

They become part of object keys, versions, snapshots and ``dataset.json``, so
each is bounded and validated before anything is written: a writer never
writes what every reader would then refuse (a namespace no one can open).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch_tgb.errors import ManifestError
from torch_tgb.manifest._json import MAX_DATASET_BYTES, MAX_DEPTH, dump_json, load_json

__all__ = [
    "MAX_FORMAT1_STATE_BYTES",
    "MAX_METADATA_DEPTH",
    "MAX_STATE_BYTES",
    "MAX_STATE_DEPTH",
    "check_metadata",
    "encode_producer_state",
    "validate_producer_id",
]

#: largest pipeline state (canonical JSON) a producer may commit with an offset (a source position is a few
#: hundred bytes; a Mix over 1,000 sources ~140 KB). Up to 4 KiB it is kept in the producer's bucket of the
#: producers' table, a larger one in its own object that only that producer reads (docs/protocol.md, *Format 2*).
MAX_STATE_BYTES = 16 * 1024 * 1024
#: largest pipeline state a format-1 version carried (inline); snapshots in parts are sized by it
MAX_FORMAT1_STATE_BYTES = 32 * 1024
#: deepest nesting of a pipeline state: a version (and a snapshot) holds it at ``producers.<id>.state``
MAX_STATE_DEPTH = MAX_DEPTH - 3
#: deepest nesting of a namespace's metadata: ``dataset.json`` holds it at ``metadata``
MAX_METADATA_DEPTH = MAX_DEPTH - 1
_PRODUCER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_producer_id(producer_id: object) -> str:
    """A producer id is 1-128 characters ``[A-Za-z0-9._-]``, starting alphanumeric.

    It becomes a path segment of object keys, so nothing else is allowed.
    """
    if not isinstance(producer_id, str) or not _PRODUCER_ID.match(producer_id):
        raise ValueError(
            f"producer_id={producer_id!r} must be 1-128 characters of [A-Za-z0-9._-] starting with a letter or digit"
        )
    return producer_id


def encode_producer_state(state: object, *, producer_id: str, offset: int) -> dict[str, Any]:
    """Check that ``state`` is a JSON object of at most :data:`MAX_STATE_BYTES`; return its JSON round trip.

    The round trip is what a restarted producer will read back (tuples become
    lists, keys strings), and it is a private copy the caller cannot mutate
    while the commit is pending. ``ValueError`` names the producer and offset.
    """
    where = f"producer {producer_id!r} offset={offset}"
    if not isinstance(state, Mapping):
        raise ValueError(f"{where}: state must be a JSON object (a dict), got {type(state).__name__}")
    return _round_trip(
        state, f"{where}: state", max_bytes=MAX_STATE_BYTES, max_depth=MAX_STATE_DEPTH, held="a producers' bucket",
        advice="commit a position, not the data: e.g. file index and record offset",
    )


def check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metadata`` as a dict, once known to fit ``dataset.json``: JSON, at most 1 MiB, nested at most 15 deep.

    ``dataset.json`` is written once and read by every rank: metadata that a
    reader would refuse would leave a namespace no one can open, so it is
    refused here, before the producer touches storage (``ValueError``).
    """
    metadata = dict(metadata or {})
    _round_trip(
        metadata, "metadata", max_bytes=MAX_DATASET_BYTES, max_depth=MAX_METADATA_DEPTH, held="dataset.json",
        advice="every rank reads dataset.json at start: store a path or a digest of large content, not the content",
    )
    return metadata


def _round_trip(value: Mapping[str, Any], what: str, *, max_bytes: int, max_depth: int, held: str,
                advice: str) -> dict[str, Any]:
    """``value``'s JSON round trip, once it is JSON of at most ``max_bytes`` nested at most ``max_depth`` deep.

    Else ``ValueError`` naming ``what``: ``held`` is the object that would hold
    it (``MAX_DEPTH - max_depth`` levels down), refused by every reader.
    """
    try:
        data = dump_json(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} is not JSON-serialisable: {e}") from e
    if len(data) > max_bytes:
        raise ValueError(f"{what} is {len(data)} bytes of JSON, over the limit of {max_bytes} ({advice})")
    try:
        return load_json(data, what=what, max_bytes=max_bytes, max_depth=max_depth)
    except ManifestError as e:  # nested too deeply for the object that would hold it
        raise ValueError(f"{e} ({held} holds it {MAX_DEPTH - max_depth} levels deep)") from None
