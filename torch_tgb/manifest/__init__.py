"""The manifest log: versions as deltas, snapshots, discovery and the commit protocol.

See ``docs/protocol.md`` for the on-storage specification.
"""

from torch_tgb.manifest.commit import AttemptResult, Committer, unfinished
from torch_tgb.manifest.control import ControlChannel, MixRecord, TrainerStatus
from torch_tgb.manifest.seal import seal_namespace
from torch_tgb.manifest.jobs import SEALER_ID, JobSpec
from torch_tgb.manifest.keys import (
    DATASET_KEY,
    GC_BOUNDARY_KEY,
    GC_BOUNDARY_PREFIX,
    LOG_PREFIX,
    SNAPSHOT_HINT_KEY,
    SNAPSHOT_PREFIX,
    KeyLayout,
    boundary_key,
    snapshot_key,
    version_key,
)
from torch_tgb.manifest.manifest import Manifest
from torch_tgb.manifest.records import (
    DatasetInfo,
    GCBoundary,
    ManifestState,
    ProducerState,
    TGBEntry,
    Version,
    validate_producer_id,
)

__all__ = [
    "DATASET_KEY",
    "GC_BOUNDARY_KEY",
    "GC_BOUNDARY_PREFIX",
    "LOG_PREFIX",
    "SNAPSHOT_HINT_KEY",
    "SEALER_ID",
    "SNAPSHOT_PREFIX",
    "AttemptResult",
    "Committer",
    "ControlChannel",
    "DatasetInfo",
    "GCBoundary",
    "JobSpec",
    "KeyLayout",
    "Manifest",
    "ManifestState",
    "MixRecord",
    "ProducerState",
    "TGBEntry",
    "TrainerStatus",
    "Version",
    "boundary_key",
    "seal_namespace",
    "snapshot_key",
    "unfinished",
    "validate_producer_id",
    "version_key",
]
