"""Provenance and removal: which steps hold a record, what a step holds, excising records, the dataset card.

Rows carry their provenance (``transforms.provenance``: the ragged key
``provenance``); producers append the lineage index as they commit
(``capture.py``, ``index.py``); :class:`Lineage` answers ``lookup`` (which
steps hold a record) and ``provenance`` (what a step holds); :func:`excise`
rewrites the steps that hold records and commits the replacements in one
manifest version, with an audit record; :func:`dataset_card` describes a
namespace from its manifest and index; :func:`verify_deny` checks that no
row still holds a denied record. See docs/provenance.md.
"""

from __future__ import annotations

from torch_tgb._lazy import lazy_exports

_LAZY = {
    "ExcisionRecord": "torch_tgb.lineage.audit",
    "ExcisionReport": "torch_tgb.lineage._excise",
    "Hit": "torch_tgb.lineage.query",
    "Lineage": "torch_tgb.lineage.query",
    "LookupResult": "torch_tgb.lineage.query",
    "RecordId": "torch_tgb.transforms.provenance",
    "RowSpan": "torch_tgb.lineage.query",
    "SourceInfo": "torch_tgb.transforms.provenance",
    "StepProvenance": "torch_tgb.lineage.query",
    "compact": "torch_tgb.lineage._compact",
    "dataset_card": "torch_tgb.lineage.card",
    "excise": "torch_tgb.lineage._excise",
    "read_records": "torch_tgb.lineage.records",
    "register_sources": "torch_tgb.lineage.sources",
    "verify_deny": "torch_tgb.lineage.deny",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports("torch_tgb.lineage", _LAZY, globals())
