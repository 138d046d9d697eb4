"""Sources in provenance: which ones a pipeline reads (found through its nodes), and their records.

A source node (``sources.UnitSource``) names its records
(``provenance_info()``); a ``Mix`` holds several; any other stage holds one
upstream node under ``source``. :func:`sources_of` walks that chain and
returns the sources whose records a pipeline's rows can name (``None`` when
a document node gives no provenance: rows then carry none);
:func:`name_source` gives an unnamed source a ``Mix``'s key as its name.

Each source is recorded once per namespace, ``_tgb/lineage/sources/<id>.json``
(:func:`register_sources`: its name, kind and unit names), so that rows name
a record by three integers and a query names it ``SOURCE:UNIT:RECORD``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from torch_tgb.errors import ProvenanceError
from torch_tgb.lineage.keys import SOURCES_PREFIX, source_key
from torch_tgb.storage import ObjectStore
from torch_tgb.transforms.provenance import SourceInfo

__all__ = ["decode_source", "encode_source", "name_source", "read_sources", "register_sources", "sources_of"]

#: how deep a chain of stages is followed (a loop in a hand-built pipeline ends here)
_MAX_DEPTH = 64


def sources_of(node: Any) -> list[SourceInfo] | None:
    """The sources behind ``node`` whose records its documents name; None if any document node names none."""
    for _ in range(_MAX_DEPTH):
        own = getattr(node, "provenance_sources", None)
        if callable(own):
            found = own()
            return None if found is None else list(found)
        node = getattr(node, "source", None)
        if node is None:
            return None
    return None


def name_source(node: Any, name: str) -> None:
    """Name the source behind ``node`` ``name`` unless it has a name of its own (a ``Mix``'s key)."""
    for _ in range(_MAX_DEPTH):
        setter = getattr(node, "name_for_provenance", None)
        if callable(setter):
            setter(name)
            return
        node = getattr(node, "source", None)
        if node is None:
            return


#: the format of a source record
_FORMAT = "tgb-source/1"
#: largest source record a reader accepts (a source of 10^5 files names them all)
MAX_SOURCE_BYTES = 64 << 20


def encode_source(info: SourceInfo) -> bytes:
    return json.dumps({"format": _FORMAT, "id": f"{info.source_id:08x}", **info.to_json()}, sort_keys=True,
                      separators=(",", ":")).encode()


def decode_source(data: bytes, *, what: str) -> SourceInfo:
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict) or obj.get("format") != _FORMAT:
            raise ValueError(f"not a {_FORMAT} record")
        info = SourceInfo(str(obj["name"]), str(obj["kind"]), tuple(str(u) for u in obj["units"]))
        if obj["id"] != f"{info.source_id:08x}":
            raise ValueError(f"says id {obj['id']}, its content is {info.source_id:08x}")
    except (ValueError, KeyError, TypeError) as e:
        raise ProvenanceError(f"{what}: malformed source record: {e}") from e
    return info


def register_sources(store: ObjectStore, infos: Iterable[SourceInfo]) -> None:
    """Record each source's name, kind and units in the namespace, once (what provenance rows refer to by id).

    Idempotent; a different source under the same 31-bit id (a digest
    collision) is refused rather than overwritten.
    """
    for info in infos:
        key = source_key(info.source_id)
        data = encode_source(info)
        if not store.put_if_absent(key, data) and store.get(key) != data:
            raise ProvenanceError(f"{store.url}: {key} records another source than {info.name!r} (a digest "
                                  "collision): rename the source (name=)")


def read_sources(store: ObjectStore) -> dict[int, SourceInfo]:
    """Every source recorded in the namespace, by id."""
    keys = [k for k in store.list(SOURCES_PREFIX) if k.endswith(".json")]
    out = {}
    for key in keys:
        data = store.get_range(key, 0, MAX_SOURCE_BYTES + 1)
        if len(data) > MAX_SOURCE_BYTES:
            raise ProvenanceError(f"{store.url}: {key} exceeds {MAX_SOURCE_BYTES} bytes")
        info = decode_source(data, what=f"{store.url}: {key}")
        out[info.source_id] = info
    return out
