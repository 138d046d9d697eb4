"""torch_tgb: Transactional Global Batches for PyTorch training.

Public names are imported on first use, so that ``import torch_tgb`` (and the
``tgb`` command) stay fast and a module's optional dependencies load only when
that module is used.
"""

from __future__ import annotations

from torch_tgb._lazy import lazy_exports
from torch_tgb.errors import (
    CommitConflict,
    ConsistencyError,
    CorruptObject,
    DataTimeout,
    FencedError,
    LayoutError,
    ManifestError,
    MixtureError,
    SchemaMismatch,
    SourceError,
    StorageError,
    TGBError,
)

__version__ = "0.1.0"

_LAZY = {
    "ControlChannel": "torch_tgb.manifest",
    "DataLoader": "torch_tgb.consumer",
    "Layout": "torch_tgb.layout",
    "Mesh": "torch_tgb.layout",
    "ProduceOptions": "torch_tgb.producer",
    "Producer": "torch_tgb.producer",
    "ReaderOptions": "torch_tgb.consumer",
    "Reclaimer": "torch_tgb.checkpoint",
    "TGBDataset": "torch_tgb.consumer",
    "checkpoint": "torch_tgb.checkpoint",
    "datapipes": "torch_tgb.datapipes",
    "open_store": "torch_tgb.storage",
    "produce": "torch_tgb.producer",
    "sources": "torch_tgb.sources",
    "transforms": "torch_tgb.transforms",
    "write_dataset": "torch_tgb.offline",
}

__all__ = sorted(
    [
        "CommitConflict",
        "ConsistencyError",
        "CorruptObject",
        "DataTimeout",
        "FencedError",
        "LayoutError",
        "ManifestError",
        "MixtureError",
        "SchemaMismatch",
        "SourceError",
        "StorageError",
        "TGBError",
        *_LAZY,
    ]
)

__getattr__, __dir__ = lazy_exports("torch_tgb", _LAZY, globals())
