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
"""

from __future__ import annotations

__all__ = ["AccelerateAware"]


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
