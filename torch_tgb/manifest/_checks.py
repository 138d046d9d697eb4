"""Checks of what a producer hands the log: its id (a path segment of object keys) and its pipeline state.

Both become part of every snapshot and of object keys, so both are bounded
and validated before anything is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch_tgb.manifest._json import dump_json, load_json

__all__ = ["MAX_STATE_BYTES", "encode_producer_state", "validate_producer_id"]

#: largest pipeline state (canonical JSON) a producer may commit with an offset. A snapshot
#: holds every producer's state and a reader accepts 8 MiB of metadata: 256 producers at this
#: limit (a source position is a few hundred bytes)
MAX_STATE_BYTES = 32 * 1024
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
    try:
        data = dump_json(state)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: state is not JSON-serialisable: {e}") from e
    if len(data) > MAX_STATE_BYTES:
        raise ValueError(
            f"{where}: state is {len(data)} bytes of JSON, over the limit of {MAX_STATE_BYTES} "
            "(commit a position, not the data: e.g. file index and record offset)"
        )
    return load_json(data, what=f"state of {where}")
