"""The pipelines as torchdata.nodes stages.

Consumer: ``ManifestPoller -> Project -> FooterIndex -> RangeReader`` is what
``TGBDataset`` composes; ``BlockShuffle`` gives random access over a sealed
namespace; ``LocalRuns`` is the run path that replaces the last three stages
for a mapped local read whose steps read slices of their own TGB only.
Producer: ``Mix -> Pack -> GlobalBatches`` turns document streams
into the global batches a ``Producer`` appends (mixture by schedule, packed
rows with attention metadata, cost-balanced dp slices); they wrap the pure
functions of ``torch_tgb.transforms``. Every stage is a ``torchdata.nodes.BaseNode`` with
``reset(initial_state)`` / ``get_state()``; a parent nests its source's state.
"""

from torch_tgb.datapipes._types import ReadTask, StepBatch, StepEntry
from torch_tgb.datapipes.batch_fetch import ErrorBudget, fetch_ranges
from torch_tgb.datapipes.footer_index import FooterIndex
from torch_tgb.datapipes.global_batches import BatchStats, GlobalBatches
from torch_tgb.datapipes.local_runs import LocalRuns, StepRun
from torch_tgb.datapipes.mix import Mix, MixStats
from torch_tgb.datapipes.pack import Pack, PackStats
from torch_tgb.datapipes.poller import ManifestPoller, PollPolicy
from torch_tgb.datapipes.project import Project
from torch_tgb.datapipes.range_reader import RangeReader
from torch_tgb.datapipes.shuffle import BlockShuffle
from torch_tgb.datapipes.stats import ConsumerStats, ReadStats, merge_stats

__all__ = [
    "BatchStats",
    "BlockShuffle",
    "ConsumerStats",
    "ErrorBudget",
    "FooterIndex",
    "GlobalBatches",
    "LocalRuns",
    "ManifestPoller",
    "Mix",
    "MixStats",
    "Pack",
    "PackStats",
    "PollPolicy",
    "Project",
    "RangeReader",
    "ReadStats",
    "ReadTask",
    "StepBatch",
    "StepEntry",
    "StepRun",
    "fetch_ranges",
    "merge_stats",
]
