"""torch_tgb: Transactional Global Batches for PyTorch training."""

from torch_tgb.errors import (
    CommitConflict,
    CorruptObject,
    DataTimeout,
    FencedError,
    LayoutError,
    ManifestError,
    SchemaMismatch,
    StorageError,
    TGBError,
)

__version__ = "0.1.0"

__all__ = [
    "CommitConflict",
    "CorruptObject",
    "DataTimeout",
    "FencedError",
    "LayoutError",
    "ManifestError",
    "SchemaMismatch",
    "StorageError",
    "TGBError",
]
