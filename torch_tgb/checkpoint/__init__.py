"""Checkpoint-aligned lifecycle: DCP state, watermarks, reclamation.

``DataState`` carries each rank's cursor through ``torch.distributed.checkpoint``;
watermarks record which steps live checkpoints can roll back to; the
``Reclaimer`` deletes what none of them can reach. The watermark records are
manifest data (``torch_tgb.manifest.watermarks``, which producers read for
``max_lag``) and are re-exported here. Names load on first use so that
importing this package does not pull in ``torch.distributed``.
"""

from __future__ import annotations

from torch_tgb._lazy import lazy_exports

_LAZY = {
    "DataState": "torch_tgb.checkpoint.data_state",
    "ReclaimReport": "torch_tgb.checkpoint.reclaimer",
    "Reclaimer": "torch_tgb.checkpoint.reclaimer",
    "Watermark": "torch_tgb.manifest.watermarks",
    "keep_last": "torch_tgb.manifest.watermarks",
    "live_checkpoints": "torch_tgb.manifest.watermarks",
    "record_watermark": "torch_tgb.manifest.watermarks",
    "retire": "torch_tgb.manifest.watermarks",
    "safe_boundary": "torch_tgb.manifest.watermarks",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports("torch_tgb.checkpoint", _LAZY, globals())
