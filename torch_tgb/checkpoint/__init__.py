"""Checkpoint-aligned lifecycle: DCP state, watermarks, reclamation.

``DataState`` carries each rank's cursor through ``torch.distributed.checkpoint``;
watermarks record which steps live checkpoints can roll back to; the
``Reclaimer`` deletes what none of them can reach. Names load on first use so
that a producer importing :mod:`torch_tgb.checkpoint.watermarks` does not pull
in ``torch.distributed``.
"""

from __future__ import annotations

from torch_tgb._lazy import lazy_exports

_LAZY = {
    "DataState": "torch_tgb.checkpoint.data_state",
    "ReclaimReport": "torch_tgb.checkpoint.reclaimer",
    "Reclaimer": "torch_tgb.checkpoint.reclaimer",
    "Watermark": "torch_tgb.checkpoint.watermarks",
    "keep_last": "torch_tgb.checkpoint.watermarks",
    "live_checkpoints": "torch_tgb.checkpoint.watermarks",
    "record_watermark": "torch_tgb.checkpoint.watermarks",
    "retire": "torch_tgb.checkpoint.watermarks",
    "safe_boundary": "torch_tgb.checkpoint.watermarks",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports("torch_tgb.checkpoint", _LAZY, globals())
