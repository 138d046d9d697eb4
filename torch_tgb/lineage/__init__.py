"""Provenance and removal: which steps hold a record, what a step holds, excising records, the dataset card.

Rows carry their provenance (``transforms.provenance``: the ragged key
``provenance``); producers append the lineage index as they commit
(``capture.py``, ``index.py``); :class:`Lineage` answers ``lookup`` (which
steps hold a record) and ``provenance`` (what a step holds); :func:`dataset_card` describes a
namespace from its manifest and index; :func:`verify_deny` checks that no
row still holds a denied record. See docs/provenance.md.
"""

from __future__ import annotations

from torch_tgb._lazy import lazy_exports

_LAZY = {
    "ExcisionRecord": "torch_tgb.lineage.audit",
    "Hit": "torch_tgb.lineage.query",
    "Lineage": "torch_tgb.lineage.query",
    "LookupResult": "torch_tgb.lineage.query",
    "RecordId": "torch_tgb.transforms.provenance",
    "RowSpan": "torch_tgb.lineage.query",
    "SourceInfo": "torch_tgb.transforms.provenance",
    "StepProvenance": "torch_tgb.lineage.query",
    "compact": "torch_tgb.lineage._compact",
    "dataset_card": "torch_tgb.lineage.card",
    "read_records": "torch_tgb.lineage.records",
    "register_sources": "torch_tgb.lineage.sources",
    "verify_deny": "torch_tgb.lineage.deny",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports("torch_tgb.lineage", _LAZY, globals())
