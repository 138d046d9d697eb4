"""How a global batch is cut into (dp, cp) slices, where a rank sits, and what it reads back.

Pure and at the bottom of the package: it imports nothing from torch_tgb but
``errors``, so ``format/``, ``manifest/`` and everything above can stand on it.

- ``Layout`` (``_layout.py``): dp x cp cut of a global batch into ``SliceData`` (``_slices.py``).
- ``Mesh``, ``resolve_rank_world`` (``_mesh.py``): a reader's position, from arguments, torch.distributed or env.
- ``plan_reads`` -> ``ReadPlan`` (``_projection.py``): a reader's mesh projected onto a written layout.
- ragged keys (``_ragged.py``): a tensor per row, stored as values plus offsets.
"""

from torch_tgb.layout._layout import LABELS_KEY, MAX_CP, MAX_DP, MAX_SLICES, Layout
from torch_tgb.layout._mesh import Mesh, resolve_rank_world
from torch_tgb.layout._cp import CP_ORDERS, cp_ranges
from torch_tgb.layout._projection import DP_SPLITS, Piece, ReadPlan, Segment, StepReads, plan_reads
from torch_tgb.layout._ragged import (
    OFFSETS_SUFFIX,
    RaggedRows,
    check_offsets,
    check_ragged,
    join_ragged,
    offsets_key,
    ragged_part,
)
from torch_tgb.layout._slices import SliceData

__all__ = [
    "CP_ORDERS",
    "LABELS_KEY",
    "DP_SPLITS",
    "MAX_CP",
    "MAX_DP",
    "MAX_SLICES",
    "OFFSETS_SUFFIX",
    "Layout",
    "Mesh",
    "Piece",
    "RaggedRows",
    "ReadPlan",
    "Segment",
    "SliceData",
    "StepReads",
    "check_offsets",
    "check_ragged",
    "cp_ranges",
    "join_ragged",
    "offsets_key",
    "plan_reads",
    "ragged_part",
    "resolve_rank_world",
]
