"""Pure transforms: the logic of the producer- and reader-side pipeline stages.

Functions of their arguments only (numpy in, numpy or plain Python out): no I/O,
no torchdata, no torch_tgb layer above ``errors``. The ``torchdata.nodes`` stages
in ``datapipes/`` and the offline writers in ``offline/`` call into these, and
tests hit them directly with hypothesis.

- ``shuffle``: permutations and ZeroBatch block-shuffle orders of (size, seed, epoch).
- ``packing``: best-fit-decreasing packing of documents into rows, with document masks.
"""

from torch_tgb.transforms.packing import IGNORE_INDEX, Span, pack_bfd, pack_rows, packing_efficiency
from torch_tgb.transforms.shuffle import block_shuffle_order, permutation

__all__ = [
    "IGNORE_INDEX",
    "Span",
    "block_shuffle_order",
    "pack_bfd",
    "pack_rows",
    "packing_efficiency",
    "permutation",
]
