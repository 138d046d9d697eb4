"""A global batch's rows joined and gathered on the calling thread: through numpy where it holds the dtype.

``torch.cat`` and ``index_select`` of a batch's rows (hundreds of KiB) run on
torch's intra-op pool. Where the other cores are busy, each call waits for a
pool thread to be scheduled (about 16 ms per call, against 12 µs through
numpy, on a shared 2-core VM with one busy neighbour), and after each call
the pool spins on a core for about 10 ms. Copying rows is memory-bound, so
one thread loses nothing. Same values, dtype and shape as the torch calls;
anything numpy does not hold the same way (another dtype, mixed dtypes, a
tensor that needs grad or is not on the CPU, 4-d and up with its memory
formats) goes to torch as before. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["cat_rows", "take_rows"]

#: dtypes that ``Tensor.numpy()`` and ``torch.from_numpy`` carry across unchanged
_NUMPY_DTYPES = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.int64,
                           torch.float16, torch.float32, torch.float64})


def cat_rows(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(parts)`` along dim 0, copied on this thread where numpy can."""
    if _in_numpy(parts):
        return torch.from_numpy(np.concatenate([p.numpy() for p in parts]))
    return torch.cat(list(parts))


def take_rows(t: torch.Tensor, index: Sequence[int]) -> torch.Tensor:
    """``t.index_select(0, index)``, gathered on this thread where numpy can."""
    if _in_numpy([t]):
        return torch.from_numpy(t.numpy()[np.asarray(index, dtype=np.int64)])
    return t.index_select(0, torch.tensor(index, dtype=torch.int64))


def _in_numpy(parts: Sequence[torch.Tensor]) -> bool:
    """Whether numpy holds ``parts`` as torch does: one supported dtype and trailing shape, CPU, no grad, 1-3-d."""
    first = parts[0]
    return (first.dtype in _NUMPY_DTYPES and 0 < first.dim() < 4
            and all(p.dtype == first.dtype and p.shape[1:] == first.shape[1:] and p.device.type == "cpu"
                    and not p.requires_grad for p in parts))
