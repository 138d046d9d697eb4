"""tgb.DataLoader's in-process iterator: torchdata's own, with a shorter ``__next__`` where torchdata allows.

With ``num_workers=0`` every step goes through the iterator's ``__next__``;
torchdata's opens a profiler span per item (about 8 µs here, a third of a
local segment step). :class:`InProcessIter` skips it, reading torchdata 0.11's
private attributes, only where this torchdata has them all (checked per
iterator); otherwise every item takes torchdata's own path: a newer torchdata
costs the shortcut, never a wrong item (``tests/consumer/test_resume.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import torch

__all__ = ["PRIVATE_ATTRIBUTES", "InProcessIter", "has_in_process_iter"]

#: what InProcessIter reads of torchdata 0.11's _StatefulSingleProcessDataLoaderIter
PRIVATE_ATTRIBUTES = ("_sampler_iter", "_IterableDataset_len_called", "_next_data", "_num_yielded", "_finished")

if TYPE_CHECKING:
    from torchdata.stateful_dataloader.stateful_dataloader import _StatefulSingleProcessDataLoaderIter as _BaseIter
else:  # torchdata's private iterator, where this torchdata has it (object: it does not)
    _BaseIter = getattr(importlib.import_module("torchdata.stateful_dataloader.stateful_dataloader"),
                        "_StatefulSingleProcessDataLoaderIter", object)


class InProcessIter(_BaseIter):
    """The StatefulDataLoader's own in-process iterator (same state, same items) with a shorter ``__next__``.

    The base ``__next__`` opens a profiler ``record_function`` span per item,
    about 8 µs here, a third of a local segment step. The base path still runs when a
    profiler is recording (the span is kept) and when the base loader's ``len()``
    was taken (it warns on a length overrun; ``DataLoader.__len__`` does not take it). It reads the base class's private
    attributes (:data:`PRIVATE_ATTRIBUTES`) where a torchdata has them all (0.11 does; checked per iterator);
    with any of them missing, or without the class, every item takes torchdata's own path: a newer torchdata
    costs the shortcut, never a wrong item (``tests/consumer/test_resume.py``).
    """

    def __init__(self, loader: Any, next_iter_state: Any = None) -> None:
        super().__init__(loader, next_iter_state)
        self._lean = all(hasattr(self, name) for name in PRIVATE_ATTRIBUTES)

    def __next__(self) -> object:
        if (
            not self._lean
            or self._sampler_iter is None
            or self._IterableDataset_len_called is not None
            or torch.autograd.profiler._is_profiler_enabled
        ):
            return super().__next__()
        try:
            data = self._next_data()
        except StopIteration:
            self._finished = True
            raise
        self._num_yielded += 1
        return data


def has_in_process_iter() -> bool:
    """Whether this torchdata has the iterator :class:`InProcessIter` extends."""
    return _BaseIter is not object
