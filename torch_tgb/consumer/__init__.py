"""The consumer side: cursor, TGBDataset and the DataLoader over it.

``Cursor`` and ``cursor_of`` live at the bottom floor (``torch_tgb.cursor``) and are
re-exported here; the dataset and loader load on first use.
"""

from __future__ import annotations

from torch_tgb._lazy import lazy_exports
from torch_tgb.cursor import CURSOR_KEY, Cursor, cursor_of, find_cursors

__all__ = sorted(
    ["BatchSchedule", "CURSOR_KEY", "ConsumerStats", "Cursor", "DataLoader", "ReaderOptions", "ScheduleStep",
     "StallPolicy", "TGBDataset", "batch_ramp", "cursor_of", "find_cursors"]
)

_LAZY = {
    "BatchSchedule": "torch_tgb.consumer._schedule",
    "ScheduleStep": "torch_tgb.consumer._schedule",
    "batch_ramp": "torch_tgb.consumer._schedule",
    "ConsumerStats": "torch_tgb.datapipes.read.stats",
    "DataLoader": "torch_tgb.consumer.loader",
    "ReaderOptions": "torch_tgb.consumer.options",
    "StallPolicy": "torch_tgb.datapipes.read.stall",
    "TGBDataset": "torch_tgb.consumer.dataset",
}

__getattr__, __dir__ = lazy_exports("torch_tgb.consumer", _LAZY, globals())
