"""The pipelines as torchdata.nodes stages, in two rooms.

- ``datapipes.read``: the reader's pipeline (``ManifestPoller``/``BlockShuffle``
  -> ``Project`` -> ``FooterIndex`` -> ``RangeReader``, or ``LocalRuns``), which
  ``TGBDataset`` composes;
- ``datapipes.produce``: the producer's stages (``Mix`` -> ``Pack`` ->
  ``GlobalBatches``; for images and video ``DecodeImages`` -> ``ResizeImages``
  -> ``Patchify`` -> ``SpliceImageTokens`` -> ``PackSamples``) over the pure
  functions of ``torch_tgb.transforms``.

Every stage is a ``torchdata.nodes.BaseNode`` with ``reset(initial_state)`` /
``get_state()``; a parent nests its source's state under ``"source"``. The
names of both rooms are re-exported here and load on first use, so a reader
never imports the producer's stages.
"""

from __future__ import annotations

from torch_tgb._lazy import lazy_exports

_READ = "torch_tgb.datapipes.read"
_PRODUCE = "torch_tgb.datapipes.produce"
_LAZY = {
    **{name: _READ for name in (
        "BlockShuffle", "ConsumerStats", "ErrorBudget", "FooterIndex", "LocalRuns", "ManifestPoller", "PollPolicy",
        "Position", "Project", "RangeReader", "ReadStats", "ReadTask", "StepBatch", "StepEntry", "StepRun",
        "fetch_ranges", "merge_stats",
    )},
    **{name: _PRODUCE for name in (
        "BatchStats", "Batching", "DecodeImages", "DecodeVideos", "GlobalBatches", "MediaStats", "Mix", "MixStats", "Pack",
        "PackSamples", "PackStats", "Patchify", "ResizeImages", "SamplePackStats", "SpliceImageTokens",
        "document_batches",
        "BucketBatches", "BucketStats", "DecodeAudio", "SpliceAudioTokens",
    )},
    "read": _READ,
    "produce": _PRODUCE,
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports("torch_tgb.datapipes", _LAZY, globals())
