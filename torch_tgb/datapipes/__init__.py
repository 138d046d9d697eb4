"""The consumer pipeline as torchdata.nodes stages.

``ManifestPoller -> Project -> FooterIndex -> RangeReader`` is what
``TGBDataset`` composes; ``BlockShuffle`` and ``Pack`` wrap the pure offline
functions for random access over a sealed namespace and for packing a
document stream. Every stage is a ``torchdata.nodes.BaseNode`` with
``reset(initial_state)`` / ``get_state()``; a parent nests its source's state.
"""

from torch_tgb.datapipes._types import ReadTask, StepBatch, StepEntry
from torch_tgb.datapipes.footer_index import FooterIndex
from torch_tgb.datapipes.pack import Pack
from torch_tgb.datapipes.poller import ManifestPoller, PollPolicy
from torch_tgb.datapipes.project import Project
from torch_tgb.datapipes.range_reader import RangeReader
from torch_tgb.datapipes.shuffle import BlockShuffle
from torch_tgb.datapipes.stats import ConsumerStats, ReadStats, merge_stats

__all__ = [
    "BlockShuffle",
    "ConsumerStats",
    "FooterIndex",
    "ManifestPoller",
    "Pack",
    "PollPolicy",
    "Project",
    "RangeReader",
    "ReadStats",
    "ReadTask",
    "StepBatch",
    "StepEntry",
    "merge_stats",
]
