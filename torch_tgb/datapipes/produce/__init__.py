"""The producer's stages: from documents to the global batches a ``Producer`` appends.

``Mix`` (a mixture of sources by weights or a schedule over steps) ->
``Pack`` (rows of ``seq_len`` tokens with attention metadata) ->
``GlobalBatches`` (``global_batch_size`` rows, cost-balanced over the dp
slices). Each is a ``torchdata.nodes.BaseNode`` over the pure functions of
``torch_tgb.transforms``, resumable from the state committed with each batch.
"""

from torch_tgb.datapipes.produce.global_batches import BatchStats, GlobalBatches
from torch_tgb.datapipes.produce.mix import Mix, MixStats
from torch_tgb.datapipes.produce.pack import Pack, PackStats

__all__ = ["BatchStats", "GlobalBatches", "Mix", "MixStats", "Pack", "PackStats"]
