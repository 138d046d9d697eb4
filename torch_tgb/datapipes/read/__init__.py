"""The reader's pipeline: from the manifest to this rank's tensors of each step.

``ManifestPoller`` (a stream) or ``BlockShuffle`` (epochs of a sealed
namespace) -> ``Project`` (which slices of which TGBs each of this rank's
steps reads) -> ``FooterIndex`` (their footers) -> ``RangeReader`` (the byte
ranges, checked and assembled): the step path. ``LocalRuns`` is the run path
that replaces the last three stages for a mapped local read whose steps read
slices of their own TGB only. ``consumer`` chooses between them once per
iteration. Every stage is a ``torchdata.nodes.BaseNode`` whose state nests
its source's under ``"source"``.
"""

from torch_tgb.datapipes.read._types import Position, ReadTask, StepBatch, StepEntry
from torch_tgb.datapipes.read.batch_fetch import ErrorBudget, fetch_ranges
from torch_tgb.datapipes.read.footer_index import FooterIndex
from torch_tgb.datapipes.read.local_runs import LocalRuns, StepRun
from torch_tgb.datapipes.read.poller import ManifestPoller, PollPolicy
from torch_tgb.datapipes.read.project import Project
from torch_tgb.datapipes.read.range_reader import RangeReader
from torch_tgb.datapipes.read.shuffle import BlockShuffle
from torch_tgb.datapipes.read.stats import ConsumerStats, ReadStats, merge_stats

__all__ = [
    "BlockShuffle",
    "ConsumerStats",
    "ErrorBudget",
    "FooterIndex",
    "LocalRuns",
    "ManifestPoller",
    "PollPolicy",
    "Position",
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
