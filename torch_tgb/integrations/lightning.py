"""PyTorch Lightning: ``tgb.DataLoader`` from ``train_dataloader()``, exact resume through Lightning's checkpoints.

Lightning saves a stateful train loader's ``state_dict()`` in its fit-loop
state and loads it back on ``fit(ckpt_path=...)``. Around that, the callback
here (:class:`ConsumedBatches`) closes the gaps where a TGB loader would
otherwise train wrong data without an error:

- **Fetch-ahead.** Lightning's fit loop fetches one batch ahead of the one it
  trains when the loader has no length (a stream that is not sealed): when
  ``ModelCheckpoint`` saves after batch k, batch k+1 has already left the
  loader. The callback asks every TGB train loader to track consumption
  (``track_consumed``/``consumed``, ``torch_tgb/consumer/_consumed.py``) and
  acknowledges one batch at ``on_train_batch_end``, which Lightning runs before
  any ``ModelCheckpoint``: the saved state is the one after the last *trained*
  batch. (A sealed namespace has a length, and Lightning does not fetch ahead.)
- **Epoch-end checkpoints.** Trained by epochs (``max_epochs``, no ``max_steps``),
  Lightning does not load the loader states of a checkpoint saved at the end of
  an epoch: the resumed run would restart the stream at step 0. The callback
  keeps the checkpoint's loader states (``on_load_checkpoint``) and hands them to
  the loaders at ``on_train_start`` (``DataLoader.resume``: a loader reads
  nothing before its first batch, so this applies to the iterator Lightning
  already made; where Lightning already loaded them it changes nothing; a loader
  that has already handed out a batch from elsewhere raises ``FrameworkError``).
- **Reloaded loaders** (``reload_dataloaders_every_n_epochs``): each new loader
  continues from the position of the one it replaces (``on_train_epoch_start``,
  before Lightning's iterator for the epoch reads).
- **Validation loaders.** A TGB validation loader reads the whole set at every
  validation: the callback restarts it after each validation run (and after the
  sanity check, which reads only its first batches). One whose namespace is not
  sealed is refused (``FrameworkError``): each validation would read other steps,
  and wait for the seal.
- **After the seal.** An epoch without batches (a ``stop_step`` stream ended, or a
  stream whose first steps were reclaimed) ends training: Lightning would repeat
  empty epochs when ``max_steps`` is set. A sealed namespace instead starts its
  next pass at the next epoch (``torch_tgb/consumer/_passes.py``).

You do not add it: torch-tgb registers it through Lightning's documented entry
points (``pytorch_lightning.callbacks_factory`` and
``lightning.pytorch.callbacks_factory`` in pyproject.toml), so every Trainer
gets one; it does nothing when no loader is a TGB loader. Pass
``ConsumedBatches()`` in ``callbacks=`` yourself only where entry points are
not loaded (a source tree that is not pip-installed). It works with the
``pytorch_lightning`` and the ``lightning`` package; this module imports the
one that is installed, and nothing else in torch_tgb imports Lightning.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeGuard

from torch_tgb.errors import FrameworkError

__all__ = ["ConsumedBatches", "lightning_callbacks", "pytorch_lightning_callbacks"]


class _Trainer(Protocol):
    """What the hooks use of a Lightning ``Trainer`` (of either package)."""

    should_stop: bool

    @property
    def callbacks(self) -> Sequence[object]: ...


class _TGBLoader(Protocol):
    """What the hooks use of a ``tgb.DataLoader``."""

    def track_consumed(self) -> None: ...

    def consumed(self) -> None: ...

    def resume(self, state: Mapping[str, Any]) -> None: ...

    def restart(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def __len__(self) -> int: ...


def _is_tgb(item: object) -> TypeGuard[_TGBLoader]:
    return all(callable(getattr(item, name, None)) for name in ("track_consumed", "consumed", "resume", "restart"))


def _is_stateful(item: object) -> bool:
    """What Lightning's ``CombinedLoader`` saves a state for (its ``_Stateful`` protocol)."""
    return callable(getattr(item, "state_dict", None)) and callable(getattr(item, "load_state_dict", None))


def flat_loaders(loaders: object) -> list[object]:
    """The loaders in ``loaders`` (a loader, or lists, tuples and mappings of them) in Lightning's flattened order."""
    if isinstance(loaders, Mapping):
        return [leaf for value in loaders.values() for leaf in flat_loaders(value)]
    if isinstance(loaders, (list, tuple)):
        return [leaf for value in loaders for leaf in flat_loaders(value)]
    return [] if loaders is None else [loaders]


def train_loaders(trainer: _Trainer) -> list[_TGBLoader]:
    """The TGB loaders among ``trainer``'s train loaders."""
    return [item for item in flat_loaders(getattr(trainer, "train_dataloader", None)) if _is_tgb(item)]


def val_loaders(trainer: _Trainer) -> list[_TGBLoader]:
    """The TGB loaders among ``trainer``'s validation loaders."""
    return [item for item in flat_loaders(getattr(trainer, "val_dataloaders", None)) if _is_tgb(item)]


def checkpoint_loader_states(checkpoint: Mapping[str, Any]) -> list[Any] | None:
    """The train loader states a Lightning checkpoint holds (its fit loop's ``combined_loader``), or None."""
    states = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {}).get("combined_loader")
    return list(states) if isinstance(states, (list, tuple)) and states else None


class _Hooks:
    """The hooks, apart from Lightning's ``Callback`` base (two packages ship it)."""

    _active = False
    _epoch_batches = 0
    _saved: list[Any] | None = None  # the train loader states of the checkpoint being resumed
    _loaders: Sequence[_TGBLoader] = ()  # the TGB train loaders of the epoch before (reloaded loaders continue them)

    def _activate(self, trainer: _Trainer) -> bool:
        # The callback can be there twice (the entry point twice, from two copies of the package
        # metadata, or once more in callbacks=): only the first one acts, or each batch would be
        # acknowledged twice.
        self._active = next(cb for cb in trainer.callbacks if isinstance(cb, _Hooks)) is self
        return self._active

    def on_load_checkpoint(self, trainer: _Trainer, pl_module: object, checkpoint: Mapping[str, Any]) -> None:
        self._saved = checkpoint_loader_states(checkpoint)

    def on_train_start(self, trainer: _Trainer, pl_module: object) -> None:
        # Lightning made its iterator (and, for a loader without length, fetched the first batch).
        if not self._activate(trainer):
            return
        self._restore_checkpoint(trainer)
        self._loaders = train_loaders(trainer)
        for loader in self._loaders:
            loader.track_consumed()  # before the fit loop fetches its second batch

    def _restore_checkpoint(self, trainer: _Trainer) -> None:
        """Hand the resumed checkpoint's states to the TGB train loaders (Lightning skips them after an epoch's end)."""
        saved, self._saved = self._saved, None
        loaders = [item for item in flat_loaders(getattr(trainer, "train_dataloader", None)) if _is_stateful(item)]
        if saved is None or not any(_is_tgb(item) for item in loaders):
            return
        if len(saved) != len(loaders):
            raise FrameworkError(
                f"the checkpoint holds {len(saved)} train loader states, this Trainer has {len(loaders)} stateful "
                "train loaders: the TGB loaders' positions cannot be matched to them; resume with the loaders "
                "the checkpoint was trained with"
            )
        for loader, state in zip(loaders, saved):
            if _is_tgb(loader):
                loader.resume(state)

    def on_train_epoch_start(self, trainer: _Trainer, pl_module: object) -> None:
        self._epoch_batches = 0
        if not self._active:
            return
        # reload_dataloaders_every_n_epochs made new loaders: each continues the one it replaces, before
        # the epoch's iterator reads it (Lightning makes that iterator after this hook, past epoch 0)
        current = train_loaders(trainer)
        if len(current) != len(self._loaders) and self._loaders:
            raise FrameworkError(
                f"the reloaded train loaders hold {len(current)} TGB loaders, the ones they replace "
                f"{len(self._loaders)}: their positions cannot be carried over"
            )
        for new, old in zip(current, self._loaders):
            if new is not old:
                new.load_state_dict(old.state_dict())
        self._loaders = current
        for loader in current:
            loader.track_consumed()

    def on_train_batch_end(
        self, trainer: _Trainer, pl_module: object, outputs: object, batch: object, batch_idx: int
    ) -> None:
        self._epoch_batches += 1
        if self._active:
            for loader in train_loaders(trainer):
                loader.consumed()

    def on_train_epoch_end(self, trainer: _Trainer, pl_module: object) -> None:
        # A stream that ended for good (stop_step, or its first steps reclaimed) makes every later
        # epoch empty; with max_steps set, Lightning would run empty epochs without end (max_epochs is
        # then unlimited). The end is at the same step on every rank, so every rank stops here.
        if self._active and self._epoch_batches == 0 and train_loaders(trainer):
            trainer.should_stop = True

    def on_validation_start(self, trainer: _Trainer, pl_module: object) -> None:
        if self._activate(trainer):
            for loader in val_loaders(trainer):
                _check_validation_loader(loader)

    def on_validation_end(self, trainer: _Trainer, pl_module: object) -> None:
        if self._active:
            for loader in val_loaders(trainer):
                loader.restart()  # the next validation reads the whole set again

    def on_sanity_check_end(self, trainer: _Trainer, pl_module: object) -> None:
        self.on_validation_end(trainer, pl_module)


def _check_validation_loader(loader: _TGBLoader) -> None:
    """``FrameworkError`` for a validation loader whose namespace is not sealed (it has no length)."""
    try:
        len(loader)
    except TypeError as e:
        raise FrameworkError(
            f"a tgb.DataLoader as a validation loader reads a stream that is not sealed ({e}): every "
            "validation would read other steps, and wait for more until the seal. Validate on a sealed "
            "namespace (`tgb seal NS` ends a stream), or keep the stream out of val_dataloader()"
        ) from e


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
