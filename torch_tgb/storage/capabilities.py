"""The conditional-write probe: refuse a store that fakes ``put_if_absent``.

Some S3 clones accept ``If-None-Match: *`` and overwrite anyway. The commit
protocol would then let two producers both "win" a version, silently. So
before a namespace is first written, :func:`ensure_conditional_writes`
creates one fresh probe key twice: the first create must succeed, the second
must report "exists" and leave the first content in place. The positive
result is cached in the namespace as ``_tgb/capabilities.json`` so later
writers pay one GET; a negative result is not cached (a fixed store may be
probed again) and raises :class:`ConditionalWriteUnsupported`.
"""

from __future__ import annotations

import json
import time
import uuid

from torch_tgb.errors import ConditionalWriteUnsupported, ObjectNotFound
from torch_tgb.storage._base import ObjectStore

__all__ = ["CAPABILITIES_KEY", "ensure_conditional_writes"]

CAPABILITIES_KEY = "_tgb/capabilities.json"
_PROBE_PREFIX = "_tgb/probe/"


def _cached(store: ObjectStore) -> bool:
    try:
        raw = store.get(CAPABILITIES_KEY)
    except ObjectNotFound:
        return False
    try:
        doc = json.loads(raw)
    except ValueError:
        return False  # damaged cache: probe again and rewrite
    return isinstance(doc, dict) and doc.get("conditional_writes") is True


def ensure_conditional_writes(store: ObjectStore) -> None:
    """Make sure ``store`` honours create-if-absent; raise if it does not.

    Cheap when the namespace was probed before (one read). Raises
    :class:`ConditionalWriteUnsupported` naming the namespace otherwise.
    """
    if _cached(store):
        return
    store.check_root()  # a missing bucket: one clear error now, not a probe retried into a confusing one
    probe = f"{_PROBE_PREFIX}{uuid.uuid4().hex}"
    first, second = b"probe-1", b"probe-2"
    try:
        created = store.put_if_absent(probe, first)
        refused = not store.put_if_absent(probe, second)
        intact = store.get(probe) == first
    finally:
        store.delete(probe)
    if not (created and refused and intact):
        raise ConditionalWriteUnsupported(
            f"{store.url}: the store does not honour create-if-absent "
            f"(probe: first create {'ok' if created else 'refused'}, second create "
            f"{'refused' if refused else 'ACCEPTED'}, content {'kept' if intact else 'OVERWRITTEN'}); "
            "torch_tgb cannot commit safely to it"
        )
    doc = {"conditional_writes": True, "probed_at": time.time(), "probe": "put_if_absent twice"}
    store.put(CAPABILITIES_KEY, json.dumps(doc, sort_keys=True).encode())
