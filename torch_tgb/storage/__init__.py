"""Object stores: one small interface, atomic create-if-absent on every backend."""

from torch_tgb.storage._base import ObjectInfo, ObjectStore, RangeFailure, RangeRequest
from torch_tgb.storage._keys import validate_key, validate_prefix
from torch_tgb.storage.memory import MemoryStore

__all__ = [
    "MemoryStore",
    "ObjectInfo",
    "ObjectStore",
    "RangeFailure",
    "RangeRequest",
    "validate_key",
    "validate_prefix",
]
