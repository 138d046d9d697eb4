"""The schema of a global batch: tensor names, TGB dtypes and trailing shapes, and its fingerprint.

A schema is what ``dataset.json`` and every footer record; ``check_schema`` is
how producers and readers compare two of them. It lives in ``format/`` because
the dtypes are the format's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torch_tgb.errors import SchemaMismatch
from torch_tgb.format._dtypes import dtype_of_tensor
from torch_tgb.layout import Layout, RaggedRows

__all__ = ["check_schema", "coded_keys", "ragged_keys", "schema_fingerprint", "schema_of"]


def schema_of(batch: Mapping[str, torch.Tensor | Sequence[torch.Tensor]]) -> dict[str, dict[str, Any]]:
    """``name -> {"dtype": ..., "shape": trailing shape}`` of a global batch, sorted by name.

    A ragged key (a list of one tensor per row) is ``{"dtype", "shape": the rows'
    trailing shape after their item dim, "ragged": True}``.
    """
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(batch):
        value = batch[name]
        ragged = not isinstance(value, torch.Tensor)
        if ragged and not (isinstance(value, (list, tuple, RaggedRows)) and value and isinstance(value[0], torch.Tensor)):
            raise SchemaMismatch(f"tensor {name!r}: expected a tensor or a non-empty list of row tensors")
        t = value[0] if ragged else value
        assert isinstance(t, torch.Tensor)  # checked just above
        dt = dtype_of_tensor(t.dtype)
        if dt is None:
            raise SchemaMismatch(f"tensor {name!r}: dtype {t.dtype} is not supported by the TGB format")
        if t.dim() < 1:
            raise SchemaMismatch(f"tensor {name!r}: a 0-dim tensor has no {'item' if ragged else 'batch'} dim 0")
        out[name] = {"dtype": dt.name, "shape": [int(s) for s in t.shape[1:]]}
        if ragged:
            out[name]["ragged"] = True
    return out


def ragged_keys(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The ragged keys of a schema, sorted."""
    return tuple(sorted(name for name, spec in schema.items() if isinstance(spec, Mapping) and spec.get("ragged")))


def coded_keys(schema: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The keys a schema says are stored compressed (``"codec"``: the spec its first producer chose), sorted.

    A hint, written into ``dataset.json`` when the namespace is created: every footer says itself
    how each of its tensors is stored, and readers decode by the footer, never by this.
    """
    specs = (schema or {}).items()
    return tuple(sorted(name for name, spec in specs if isinstance(spec, Mapping) and spec.get("codec")))


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
        if bool(spec.get("ragged", False)) != bool(want.get("ragged", False)):
            kinds = ["ragged" if s.get("ragged") else "dense" for s in (spec, want)]
            raise SchemaMismatch(f"{prefix}tensor {name!r} is {kinds[0]}, the namespace schema has it {kinds[1]}")
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

