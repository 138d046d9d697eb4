"""PyTorch Lightning: ``tgb.DataLoader`` from ``train_dataloader()``, exact resume through Lightning's checkpoints.

Lightning saves a stateful train loader's ``state_dict()`` in its fit-loop
state and loads it back on ``fit(ckpt_path=...)``. Its fit loop, though,
fetches one batch ahead of the one it trains whenever the loader has no
length (a TGB stream never has one): when ``ModelCheckpoint`` saves after
batch k, batch k+1 has already left the loader, so the saved state would
resume one step late and silently skip a batch.

:class:`ConsumedBatches` closes that gap with the loader's acknowledgements
(``track_consumed`` / ``consumed``, ``torch_tgb/consumer/_consumed.py``): it
asks every TGB train loader to track consumption when training (or an epoch)
starts, and acknowledges one batch at ``on_train_batch_end``, which Lightning
runs before any ``ModelCheckpoint`` (checkpoint callbacks always run last).
The state in a checkpoint is then the one after the last *trained* batch.
It also ends training after an epoch without batches (the stream ended at
its seal), which Lightning would otherwise repeat when ``max_steps`` is set.

You do not add it: torch-tgb registers it through Lightning's documented entry
points (``pytorch_lightning.callbacks_factory`` and
``lightning.pytorch.callbacks_factory`` in pyproject.toml), so every Trainer
gets one; it does nothing when no train loader is a TGB loader. Pass
``ConsumedBatches()`` in ``callbacks=`` yourself only where entry points are
not loaded (a source tree that is not pip-installed). It works with the
``pytorch_lightning`` and the ``lightning`` package; this module imports the
one that is installed, and nothing else in torch_tgb imports Lightning.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeGuard

__all__ = ["ConsumedBatches", "lightning_callbacks", "pytorch_lightning_callbacks"]


class _Trainer(Protocol):
    """What the hooks use of a Lightning ``Trainer`` (of either package)."""

    should_stop: bool

    @property
    def callbacks(self) -> Sequence[object]: ...


class _Acknowledging(Protocol):
    """A loader that takes consumption acknowledgements (``tgb.DataLoader``)."""

    def track_consumed(self) -> None: ...

    def consumed(self) -> None: ...


def _acknowledges(item: object) -> TypeGuard[_Acknowledging]:
    return callable(getattr(item, "track_consumed", None)) and callable(getattr(item, "consumed", None))


def train_loaders(trainer: _Trainer) -> Iterator[_Acknowledging]:
    """The train loaders of ``trainer`` that take consumption acknowledgements (TGB loaders)."""
    stack: list[object] = [getattr(trainer, "train_dataloader", None)]
    while stack:
        item = stack.pop()
        if _acknowledges(item):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


class _Hooks:
    """The hooks, apart from Lightning's ``Callback`` base (two packages ship it)."""

    _active = False
    _epoch_batches = 0

    def _activate(self, trainer: _Trainer) -> None:
        # The callback can be there twice (the entry point twice, from two copies of the package
        # metadata, or once more in callbacks=): only the first one acts, or each batch would be
        # acknowledged twice.
        self._active = next(cb for cb in trainer.callbacks if isinstance(cb, _Hooks)) is self

    def on_train_start(self, trainer: _Trainer, pl_module: object) -> None:
        # The fit loop has fetched the first batch (and no more): ask for tracking before the second.
        self._activate(trainer)
        if self._active:
            for loader in train_loaders(trainer):
                loader.track_consumed()

    def on_train_epoch_start(self, trainer: _Trainer, pl_module: object) -> None:
        # reload_dataloaders_every_n_epochs hands in new loaders before this hook.
        self._epoch_batches = 0
        self.on_train_start(trainer, pl_module)

    def on_train_batch_end(self, trainer: _Trainer, pl_module: object, outputs: object, batch: object, batch_idx: int) -> None:
        self._epoch_batches += 1
        if self._active:
            for loader in train_loaders(trainer):
                loader.consumed()

    def on_train_epoch_end(self, trainer: _Trainer, pl_module: object) -> None:
        # A TGB stream ends at its seal and every later epoch is empty; with max_steps set, Lightning
        # would run empty epochs without end (max_epochs is then unlimited). The seal is at the same
        # step on every rank, so every rank stops here.
        if self._active and self._epoch_batches == 0 and next(train_loaders(trainer), None) is not None:
            trainer.should_stop = True

@functools.cache
def _callback_class(base: type) -> type:
    return type("ConsumedBatches", (_Hooks, base), {"__doc__": _Hooks.__doc__, "__module__": __name__})


def pytorch_lightning_callbacks() -> list[Any]:
    """Entry point of ``pytorch_lightning.callbacks_factory``: one :class:`ConsumedBatches`."""
    from pytorch_lightning import Callback

    return [_callback_class(Callback)()]


def lightning_callbacks() -> list[Any]:
    """Entry point of ``lightning.pytorch.callbacks_factory``: one :class:`ConsumedBatches`."""
    from lightning.pytorch import Callback

    return [_callback_class(Callback)()]


def _installed_callback_class() -> type:
    import importlib

    for package in ("pytorch_lightning", "lightning.pytorch"):
        try:
            return _callback_class(importlib.import_module(package).Callback)
        except ImportError:
            continue
    raise ImportError("torch_tgb.integrations.lightning needs PyTorch Lightning: pip install 'torch-tgb[lightning]'")


#: Lightning callback: a TGB train loader's state is what the fit loop trained, not what it fetched ahead
ConsumedBatches = _installed_callback_class()
