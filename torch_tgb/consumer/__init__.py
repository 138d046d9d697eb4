"""The consumer side: cursor, TGBDataset and the DataLoader over it.

``Cursor`` and ``cursor_of`` load eagerly (the checkpoint module needs them
without the reading pipeline); the dataset and loader load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch_tgb.consumer.cursor import CURSOR_KEY, Cursor, cursor_of, find_cursors

__all__ = sorted(
    ["CURSOR_KEY", "ConsumerStats", "Cursor", "DataLoader", "TGBDataset", "cursor_of", "find_cursors"]
)

_LAZY = {
    "ConsumerStats": "torch_tgb.datapipes.stats",
    "DataLoader": "torch_tgb.consumer.loader",
    "TGBDataset": "torch_tgb.consumer.dataset",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'torch_tgb.consumer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
