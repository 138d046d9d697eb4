"""torchtitan: a TGB namespace as the trainer's data loader, its position in torchtitan's DCP checkpoints.

torchtitan's trainer builds its loader from config with
``config.dataloader.build(dp_world_size=, dp_rank=, tokenizer=, seq_len=,
local_batch_size=, ...)``, iterates ``(input_dict, labels)`` pairs (the model
input under ``"input"``, other keys become forward kwargs) and checkpoints it
as a DCP ``Stateful`` under ``"dataloader"``. :class:`TGBDataLoader` is such a
loader over ``tgb.DataLoader``: a recipe swaps one config field::

    from torch_tgb.integrations.torchtitan import TGBDataLoader

    config = llama3_debugmodel()                          # any Trainer.Config
    config.dataloader = TGBDataLoader.Config(dataset_path="s3://bucket/run1")

Each dp rank reads its own slice (a context-parallel group reads whole
sequences; torchtitan cuts them for its cp ranks). The rows per step are what
the producer wrote (global batch / dp): ``training.local_batch_size`` must
match, and the first batch is checked. torchtitan does not fetch ahead, so the
saved state is the one after the last trained step.

State: unlike torchtitan's own loader (a pickled StatefulDataLoader state
under ``dp_rank_<r>``, refused on another dp degree), the state is
``DataState``'s: JSON in a ``uint8`` tensor under one rank-independent key, so
a checkpoint loads on any dp degree and never unpickles. Needs torchtitan
(``pip install --no-deps torchtitan`` plus ``torch-tgb[torchtitan]``; see
docs/frameworks.md); nothing else in torch_tgb imports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

try:
    from torchtitan.components.dataloader import BaseDataLoader
except ImportError as e:  # pragma: no cover - exercised where torchtitan is not installed
    raise ImportError(
        "torch_tgb.integrations.torchtitan needs torchtitan: see docs/frameworks.md (torchtitan) for the install"
    ) from e

from torch_tgb.checkpoint.data_state import DataState
from torch_tgb.consumer.loader import DataLoader
from torch_tgb.errors import LayoutError
from torch_tgb.layout import Mesh

__all__ = ["TGBDataLoader"]


class TGBDataLoader(BaseDataLoader):
    """torchtitan data loader over a TGB namespace: ``(input_dict, labels)`` per step of this dp rank's slice."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        # BaseDataLoader.Config's ``dataset_path`` is the namespace URI (``dataset`` is unused).
        input_key: str = "input_ids"
        """Tensor handed to the model as ``input_dict["input"]``."""

        labels_key: str = "labels"
        """Tensor used as the labels."""

        extra_keys: dict[str, str] = field(default_factory=dict)
        """More tensors for the model's forward, ``{tensor: kwarg}`` (e.g. ``{"position_ids": "positions"}``)."""

        num_workers: int = 0
        """tgb.DataLoader worker processes."""

        prefetch: int = 4
        """Steps read ahead on a background thread (remote stores)."""

        timeout: float | None = None
        """Seconds to wait for a new commit before DataTimeout; None: wait (with warnings)."""

        storage_options: dict[str, str] = field(default_factory=dict)
        """fsspec options of the namespace's store."""

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        local_batch_size: int | None = None,
        seq_len: int | None = None,
        **unused: object,
    ) -> None:
        """The arguments torchtitan's trainer builds a loader with (``tokenizer`` and the rest are not needed)."""
        if not config.dataset_path:
            raise ValueError("TGBDataLoader.Config(dataset_path=...) must name the namespace")
        self.config = config
        self.local_batch_size = local_batch_size
        self.loader = DataLoader(
            config.dataset_path,
            mesh=Mesh(dp_rank=dp_rank, dp_size=dp_world_size),
            num_workers=config.num_workers,
            prefetch=config.prefetch,
            timeout=config.timeout,
            storage_options=config.storage_options,
        )

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        c = self.config
        checked = False
        for batch in self.loader:
            if not checked:
                self._check(batch)
                checked = True
            inputs = {"input": batch[c.input_key], **{kwarg: batch[name] for name, kwarg in c.extra_keys.items()}}
            yield inputs, batch[c.labels_key]

    def _check(self, batch: dict[str, torch.Tensor]) -> None:
        c = self.config
        missing = [k for k in (c.input_key, c.labels_key, *c.extra_keys) if k not in batch]
        if missing:
            raise LayoutError(f"{c.dataset_path}: step tensors {sorted(batch)} lack {missing} (TGBDataLoader.Config keys)")
        rows = batch[c.input_key].shape[0]
        if self.local_batch_size is not None and rows != self.local_batch_size:
            raise LayoutError(
                f"{c.dataset_path}: training.local_batch_size={self.local_batch_size}, but this dp rank's slice of "
                f"a step has {rows} rows (the global batch the producer wrote / dp); set local_batch_size={rows}"
            )

    def state_dict(self) -> dict[str, Any]:
        return DataState(self.loader).state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:  # torchtitan passes {} for a fresh start
            DataState(self.loader).load_state_dict(state_dict)
