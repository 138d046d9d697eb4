"""The two attributes by which HF accelerate leaves ``tgb.DataLoader`` as it is, and carries its state.

``Accelerator.prepare(model, optimizer, loader)`` rebuilds every DataLoader it
is given for "one slice per process": for an IterableDataset it either
dispatches (process 0 reads, the batches are split and sent to the others) or
wraps the dataset in an ``IterableDatasetShard`` that keeps every n-th batch.
A TGB loader already reads this rank's own slice of every step, so either
rebuild is wrong (dispatching silently trains process 0's slice only). Every
accelerate release since 0.2x first asks ``getattr(loader,
"_is_accelerate_prepared", False)`` and returns such a loader unchanged (still
registered, so ``save_state``/``load_state`` see it); ``save_state`` stores a
registered loader's ``state_dict()`` when ``loader.use_stateful_dataloader``
is true, and ``load_state`` hands it back to ``load_state_dict``.

accelerate writes that state from every process to one file
(``dl_state_dict.bin``), so the processes must write the same bytes' worth:
once accelerate has seen the loader, its ``state_dict()`` is the
rank-independent canonical state (the first step not consumed, which the
ranks of a synchronous job share and every rank loads), as ``DataState``
saves it for DCP. Nothing here imports accelerate.

Off that path, ``prepare`` of a *plain* torch DataLoader (or torchdata
``StatefulDataLoader``) over a ``TGBDataset`` does rebuild it: with more than
one process accelerate's ``DataLoaderDispatcher`` has process 0 read every
batch and hands process k the k-th of each group (every rank then trains
slice 0 of alternate steps), and its ``IterableDatasetShard``
(``dispatch_batches=False``) keeps every n-th item (and with ``batch_size=None``
fails on ``None * n``). Both call the dataset's ``set_epoch`` before they read
it, and iterate it from their own frames; :func:`refuse_accelerate_wrapping`
looks for those frames and raises :class:`~torch_tgb.errors.FrameworkError`
saying to pass a ``tgb.DataLoader`` instead.
"""

from __future__ import annotations

import sys
from types import FrameType

from torch_tgb.errors import FrameworkError

__all__ = ["AccelerateAware", "accelerate_wrapper", "refuse_accelerate_wrapping"]

#: accelerate's classes that re-shard an IterableDataset over processes, and what each does to it
RESHARDING = {
    "DataLoaderDispatcher": "process 0 would read every batch and hand each process one of every group of them: "
    "every rank would train process 0's slice of alternate steps, and no other slice would be read",
    "IterableDatasetShard": "each process would keep every n-th step of its own slice (dispatch_batches=False): "
    "each rank would skip the steps the others keep, so most of every slice would never be read",
}

#: frames looked through above the dataset's __iter__ / set_epoch (accelerate's loop, torch's fetcher, ...)
SEARCH_DEPTH = 12


class AccelerateAware:
    """Mixin of ``tgb.DataLoader``: accelerate keeps it as it is and saves its (rank-independent) state."""

    #: accelerate's save_state/load_state carry the state_dict() of a prepared loader with this set
    use_stateful_dataloader = True
    _seen_by_accelerate = False

    @property
    def _is_accelerate_prepared(self) -> bool:
        """True: asked by ``Accelerator.prepare_data_loader``, which then keeps this loader as it is."""
        self._seen_by_accelerate = True  # from now on the state is the one every rank may write
        return True

    @_is_accelerate_prepared.setter
    def _is_accelerate_prepared(self, value: bool) -> None:
        # Accelerator.prepare marks what it prepared; a TGB loader counts as prepared already.
        self._seen_by_accelerate = self._seen_by_accelerate or bool(value)


def accelerate_wrapper(frame: FrameType | None, depth: int = SEARCH_DEPTH) -> tuple[str, int] | None:
    """``(class name, processes)`` of an accelerate re-sharding wrapper among ``frame`` and its ``depth`` callers."""
    for _ in range(depth):
        if frame is None:
            return None
        if str(frame.f_globals.get("__name__", "")).startswith("accelerate."):
            owner = frame.f_locals.get("self")
            name = type(owner).__name__
            if name in RESHARDING:
                processes = getattr(owner, "num_processes", None)
                if processes is None:
                    processes = getattr(getattr(owner, "state", None), "num_processes", None)
                return name, int(processes) if isinstance(processes, int) else 0
        frame = frame.f_back
    return None


def refuse_accelerate_wrapping(namespace: str, *, skip: int = 1) -> None:
    """Raise :class:`FrameworkError` if accelerate re-shards this TGB dataset over 2 or more processes (see above).

    ``skip``: frames above the caller's own (1: start at the caller's caller).
    One process is left alone: a wrapper over one process changes nothing.
    """
    found = accelerate_wrapper(sys._getframe(skip + 1))
    if found is None or found[1] == 1:
        return
    name, processes = found
    raise FrameworkError(
        f"{namespace}: accelerate's {name} re-shards a TGBDataset over {processes or 'several'} processes, but "
        f"every rank's TGBDataset already reads that rank's own slice of each step: {RESHARDING[name]}. Pass a "
        "tgb.DataLoader to accelerator.prepare instead of a torch DataLoader over the dataset "
        "(tgb.DataLoader(ns, ...) or tgb.DataLoader(dataset)): prepare keeps it as it is, and "
        "save_state/load_state carry its position (docs/frameworks.md)"
    )
