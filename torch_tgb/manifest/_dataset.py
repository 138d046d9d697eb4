"""Creating ``_tgb/dataset.json`` once, and checking every later writer against it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torch_tgb.errors import (
    AmbiguousWriteError,
    CorruptObject,
    LayoutError,
    ManifestError,
    ObjectNotFound,
    SchemaMismatch,
)
from torch_tgb.manifest._json import MAX_DATASET_BYTES, dump_json
from torch_tgb.manifest._reads import read_bounded
from torch_tgb.manifest import keys as _keys
from torch_tgb.manifest.keys import DATASET_KEY, FLAT, KeyLayout, boundary_key
from torch_tgb.manifest.records import DatasetInfo, GCBoundary
from torch_tgb.manifest.reserve import create_reserve
from torch_tgb.storage import ObjectStore

if TYPE_CHECKING:
    from torch_tgb.layout import Layout

__all__ = ["check_dataset", "ensure_dataset", "read_dataset"]


def read_dataset(store: ObjectStore, *, where: str) -> DatasetInfo | None:
    """The namespace's ``dataset.json``, checked (:func:`check_dataset`); ``None`` before anyone created it."""
    try:
        data = read_bounded(store, DATASET_KEY, where=where)
    except ObjectNotFound:
        return None
    what = f"{where}{DATASET_KEY}"
    info = DatasetInfo.decode(data, what=what)
    check_dataset(info, what=what)
    return info


def check_dataset(info: DatasetInfo, *, what: str) -> None:
    """Refuse a dataset.json whose layout is out of bounds or whose fingerprint does not match its content.

    Every reader checks this before using the layout: an edited ``dp`` (say
    2**40) is refused here, by the layout's bounds or by the fingerprint,
    instead of making a consumer plan 2**40 reads.
    """
    from torch_tgb.format import schema_fingerprint
    from torch_tgb.layout import Layout

    try:
        layout = Layout.from_json(info.layout)
    except LayoutError as e:
        raise CorruptObject(f"{what}: invalid layout {dict(info.layout)}: {e}") from e
    try:
        actual = schema_fingerprint(layout, info.schema, info.metadata)
    except (TypeError, ValueError) as e:  # not JSON-serialisable after all
        raise CorruptObject(f"{what}: cannot fingerprint its content: {e}") from e
    if actual != info.fingerprint:
        raise CorruptObject(
            f"{what}: stored fingerprint {info.fingerprint} does not match its layout/schema/metadata "
            f"(fingerprint {actual}): the file was edited or damaged"
        )


def ensure_dataset(
    store: ObjectStore,
    layout: Layout | Mapping[str, Any],
    schema: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    *,
    read: Callable[[], DatasetInfo | None],
    keys: KeyLayout | None = None,
) -> DatasetInfo:
    """Create the dataset description or check ours against it (see ``Manifest.ensure_dataset``).

    A namespace created here gets ``keys`` (default :data:`~torch_tgb.manifest.keys.NEW_NAMESPACE_KEYS`),
    except one that already holds a flat log without a dataset.json: it stays flat.
    """
    from torch_tgb.format import check_schema, schema_fingerprint
    from torch_tgb.layout import Layout

    if not isinstance(layout, Layout):
        layout = Layout.from_json(layout)
    metadata = dict(metadata or {})
    fingerprint = schema_fingerprint(layout, schema, metadata)
    keys = _keys.NEW_NAMESPACE_KEYS if keys is None else keys
    if keys.spread and store.exists(FLAT.version_key(1)):
        keys = FLAT  # versions written before any dataset.json (the low-level API): they keep their keys
    ours = DatasetInfo(layout.to_json(), dict(schema), metadata, fingerprint, time.time(), keys)
    data = ours.encode()
    if len(data) > MAX_DATASET_BYTES:  # written once, read by every rank: never write what readers refuse
        raise ValueError(
            f"{store.url}: {DATASET_KEY} would be {len(data)} bytes (layout, schema of {len(schema)} keys, metadata), "
            f"over the {MAX_DATASET_BYTES}-byte limit every reader holds it to"
        )
    stored = None
    for _ in range(8):
        try:
            if store.put_if_absent(DATASET_KEY, data):
                # The first GC-boundary generation: a reader's boundary read is then one LIST that finds one
                # (without any, it also reads the pre-generation _tgb/gc_boundary.json).
                store.put_if_absent(boundary_key(0, 0), dump_json(GCBoundary().to_json()))
                create_reserve(store)  # room for the Reclaimer's writes once the disk is full (local only)
                return ours
        except AmbiguousWriteError:
            pass  # landed or not: read it back
        stored = read()
        if stored is not None:
            break
    if stored is None:
        raise ManifestError(f"{store.url}: {DATASET_KEY}: no definite reply creating it after retries")
    if stored.fingerprint == fingerprint:
        return stored
    try:
        if dict(stored.layout) != layout.to_json():
            raise SchemaMismatch(f"layout {layout.to_json()} differs from {dict(stored.layout)}")
        if dict(stored.metadata) != metadata:
            raise SchemaMismatch(f"metadata {metadata} differs from {dict(stored.metadata)}")
        check_schema(schema, stored.schema)  # -1 in a stored trailing shape matches any size
    except SchemaMismatch as e:
        raise SchemaMismatch(
            f"{store.url}: layout/schema fingerprint {fingerprint} disagrees with the namespace's "
            f"{stored.fingerprint} ({DATASET_KEY}): {e}"
        ) from e
    return stored
