"""``SliceData``: the tensors of one (dp, cp) slice, what ``Layout.cut`` makes and the format writes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["SliceData"]


@dataclass(frozen=True)
class SliceData:
    """The tensors of one (dp, cp) slice of a global batch, ready to be written.

    ``ragged``: the ragged keys among ``tensors``; each is stored as its values
    tensor under its name plus its offsets under ``name + "_offsets"``.
    """

    dp: int
    cp: int
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    ragged: tuple[str, ...] = ()
