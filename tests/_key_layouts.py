"""Both manifest key layouts under one test (docs/protocol.md, *Manifest keys spread over prefixes*).

``KEY_LAYOUTS`` names the namespaces a parametrised test runs on: ``no-dataset``
(versions written with no dataset.json: flat keys, the layout found by
probing), ``flat`` (a namespace created before spreading: dataset.json without
``keys``) and ``spread`` (the default for new namespaces). ``new_namespaces``
makes namespaces that producers create get a layout (monkeypatched default).
"""

from __future__ import annotations

import pytest

from torch_tgb.layout import Layout
from torch_tgb.manifest import keys as manifest_keys
from torch_tgb.manifest import Manifest
from torch_tgb.manifest.keys import FLAT, KeyLayout
from torch_tgb.storage import ObjectStore

KEY_LAYOUTS = ("no-dataset", "flat", "spread")
SPREAD = KeyLayout(manifest_keys.SPREAD_PREFIXES)
SCHEMA = {"x": {"dtype": "int32", "shape": [-1]}}


def layout_of(name: str) -> KeyLayout:
    return SPREAD if name == "spread" else FLAT


def create_namespace(store: ObjectStore, name: str) -> ObjectStore:
    """``store`` holding a namespace of key layout ``name`` (none of dataset.json for ``no-dataset``)."""
    if name != "no-dataset":
        Manifest(store).ensure_dataset(Layout(), SCHEMA, keys=layout_of(name))
    return store


def new_namespaces(monkeypatch: pytest.MonkeyPatch, name: str) -> KeyLayout:
    """Namespaces created from now on in this process get layout ``name`` (``no-dataset`` means flat)."""
    layout = layout_of(name)
    monkeypatch.setattr(manifest_keys, "NEW_NAMESPACE_KEYS", layout)
    return layout
