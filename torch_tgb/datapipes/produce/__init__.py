"""The producer's stages: from documents to the global batches a ``Producer`` appends.

``Mix`` (a mixture of sources by weights or a schedule over steps) ->
``Pack`` (rows of ``seq_len`` tokens: token-efficient rows, or per-token arrays) ->
``GlobalBatches`` (``global_batch_size`` rows, cost-balanced over the dp
slices and micro-batches); ``document_batches`` chains the last two as a
``Batching`` says. For images and video: ``DecodeImages`` /
``DecodeVideos`` -> ``ResizeImages`` -> ``Patchify`` -> ``SpliceImageTokens``
-> ``PackSamples`` (rows with ragged pixel fields) -> ``GlobalBatches``; for audio ``DecodeAudio``
-> ``SpliceAudioTokens`` -> ``PackSamples``; same-shape batches (diffusion, duration buckets)
``BucketBatches``. Each is a ``torchdata.nodes.BaseNode`` over the pure functions of
``torch_tgb.transforms``, resumable from the state committed with each batch.
"""

from torch_tgb.datapipes.produce._sample_map import MediaStats
from torch_tgb.datapipes.produce.audio import DecodeAudio, SpliceAudioTokens
from torch_tgb.datapipes.produce.batches import Batching, document_batches
from torch_tgb.datapipes.produce.bucket import BucketBatches, BucketStats
from torch_tgb.datapipes.produce.global_batches import BatchStats, GlobalBatches
from torch_tgb.datapipes.produce.images import DecodeImages, DecodeVideos, Patchify, ResizeImages, SpliceImageTokens
from torch_tgb.datapipes.produce.mix import Mix, MixStats
from torch_tgb.datapipes.produce.pack import Pack, PackStats
from torch_tgb.datapipes.produce.pack_samples import PackSamples, SamplePackStats

__all__ = [
    "BatchStats",
    "Batching",
    "BucketBatches",
    "BucketStats",
    "DecodeAudio",
    "DecodeImages",
    "DecodeVideos",
    "GlobalBatches",
    "MediaStats",
    "Mix",
    "MixStats",
    "Pack",
    "PackSamples",
    "PackStats",
    "Patchify",
    "ResizeImages",
    "SamplePackStats",
    "SpliceAudioTokens",
    "SpliceImageTokens",
    "document_batches",
]
