"""The audit trail of excisions: one immutable record per excision, chained from the manifest.

``_tgb/excisions/<v:020d>-<tok8>.json`` is written by the attempt that
commits replacement version ``v`` (``manifest/replace.py``), before the
version; the version's replacements name it (``ReplacedRef.audit``) and it
names the record before it (``previous``), so the trail is read from the
newest version back, whatever the Reclaimer deleted of the log. A record
written by an attempt that lost its slot is named by nothing and never read.

A record says who excised (``who``, from ``--by`` or the user and host),
when, why (``reason``), which records (as given and as index hashes), which
steps were rewritten, which objects were superseded and how many spans and
tokens were removed.
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torch_tgb.errors import ProvenanceError
from torch_tgb.lineage.keys import excision_key
from torch_tgb.manifest import Manifest
from torch_tgb.manifest._reads import read_bounded
from torch_tgb.storage import ObjectStore

__all__ = ["ExcisionRecord", "default_who", "read_excisions", "write_excision"]

_FORMAT = "tgb-excision/1"


def default_who() -> str:
    """``user@host`` of this process (what an audit record says when ``--by`` is not given)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class ExcisionRecord:
    """One excision: see the module docstring. ``hits``: ``[record hash (decimal), step]`` pairs removed."""

    version: int
    who: str
    when: float
    reason: str
    records: list[str]
    steps: list[int]
    objects: list[str]
    spans: int
    tokens: int
    hits: list[list[int | str]] = field(default_factory=list)
    previous: str = ""

    def pairs(self) -> set[tuple[int, int]]:
        """``(record hash, step)`` of every span removed."""
        return {(int(h), int(s)) for h, s in self.hits}

    def to_json(self) -> dict[str, Any]:
        return {"format": _FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, obj: object, *, what: str) -> ExcisionRecord:
        if not isinstance(obj, dict) or obj.get("format") != _FORMAT:
            raise ProvenanceError(f"{what}: not an excision record ({_FORMAT})")
        try:
            fields = {k: obj[k] for k in cls.__dataclass_fields__ if k in obj}
            return cls(**fields)
        except TypeError as e:
            raise ProvenanceError(f"{what}: malformed excision record: {e}") from e


def write_excision(store: ObjectStore, record: ExcisionRecord, token: str) -> str:
    """Write ``record`` as the audit record of the attempt ``token`` at its version; its key."""
    key = excision_key(record.version, token)
    store.put(key, json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")).encode())
    return key


def read_excisions(store: ObjectStore, *, manifest: Manifest | None = None) -> list[ExcisionRecord]:
    """Every excision of the namespace, oldest first: from the newest version's replacements, along ``previous``."""
    manifest = manifest or Manifest(store)
    head = manifest.latest_version()
    replaced = manifest.read_version(head).replaced if head else None
    key = replaced.audit if replaced is not None else ""
    out: list[ExcisionRecord] = []
    seen: set[str] = set()
    while key and key not in seen:
        seen.add(key)
        data = read_bounded(store, key, where=f"{store.url}: ", what=f"excision record {key}")
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise ProvenanceError(f"{store.url}: {key}: not JSON: {e}") from e
        record = ExcisionRecord.from_json(obj, what=f"{store.url}: {key}")
        out.append(record)
        key = record.previous
    return out[::-1]


def records_text(records: Sequence[str], limit: int = 5) -> str:
    return ", ".join(records[:limit]) + (f" and {len(records) - limit} more" if len(records) > limit else "")
