"""The schema of a global batch: tensor names, TGB dtypes and trailing shapes, and its fingerprint.

A schema is what ``dataset.json`` and every footer record; ``check_schema`` is
how producers and readers compare two of them. It lives in ``format/`` because
the dtypes are the format's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import torch

from torch_tgb.errors import SchemaMismatch
from torch_tgb.format._dtypes import dtype_of_tensor
from torch_tgb.layout import Layout

__all__ = ["check_schema", "schema_fingerprint", "schema_of"]


def schema_of(batch: Mapping[str, torch.Tensor]) -> dict[str, dict[str, Any]]:
    """``name -> {"dtype": ..., "shape": trailing shape}`` of a global batch, sorted by name."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(batch):
        t = batch[name]
        dt = dtype_of_tensor(t.dtype)
        if dt is None:
            raise SchemaMismatch(f"tensor {name!r}: dtype {t.dtype} is not supported by the TGB format")
        if t.dim() < 1:
            raise SchemaMismatch(f"tensor {name!r}: a 0-dim tensor has no batch dim 0")
        out[name] = {"dtype": dt.name, "shape": [int(s) for s in t.shape[1:]]}
    return out


def check_schema(schema: Mapping[str, Any], expected: Mapping[str, Any], *, where: str = "") -> None:
    """Raise :class:`SchemaMismatch` unless ``schema`` matches ``expected``.

    Names and dtypes must be equal; a ``-1`` in an expected trailing shape
    matches any size (variable sequence lengths).
    """
    prefix = f"{where}: " if where else ""
    if set(schema) != set(expected):
        raise SchemaMismatch(
            f"{prefix}tensors {sorted(schema)} do not match the namespace schema {sorted(expected)}"
        )
    for name, spec in schema.items():
        want = expected[name]
        if spec.get("dtype") != want.get("dtype"):
            raise SchemaMismatch(f"{prefix}tensor {name!r} has dtype {spec.get('dtype')}, expected {want.get('dtype')}")
        got_shape, want_shape = list(spec.get("shape", [])), list(want.get("shape", []))
        if len(got_shape) != len(want_shape) or any(w not in (-1, g) for g, w in zip(got_shape, want_shape)):
            raise SchemaMismatch(
                f"{prefix}tensor {name!r} has trailing shape {got_shape}, expected {want_shape}"
            )


def schema_fingerprint(layout: Layout, schema: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> str:
    """sha256 hex of the canonical JSON of (layout, schema, metadata)."""
    doc = {"layout": layout.to_json(), "schema": schema, "metadata": dict(metadata or {})}
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()

