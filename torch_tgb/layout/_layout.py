"""How a global batch is cut into (dp, cp) slices, and how ranks read them back.

``Layout(dp, cp, seq_keys, cp_order)``: dim 0 of every tensor is split into
``dp`` equal parts; tensors named in ``seq_keys`` are also split along dim 1
into ``cp`` chunks -- contiguous, or zig-zag (``2*cp`` chunks, cp rank ``i``
holds chunks ``i`` and ``2*cp-1-i``, which balances causal-attention work);
other tensors are repeated in every cp slice. Slices come out in (dp, cp)
order, dp-major, the order of the TGB object.

Pure: the package ``torch_tgb.layout`` imports nothing above ``errors``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch

from torch_tgb.errors import LayoutError
from torch_tgb.layout._cp import CP_ORDERS, cp_ranges
from torch_tgb.layout._ragged import RaggedRows, check_ragged, offsets_key, ragged_part
from torch_tgb.layout._slices import SliceData

__all__ = ["MAX_CP", "MAX_DP", "MAX_SLICES", "Layout"]

#: Upper bounds of a layout. A TGB object holds one footer entry per slice and
#: a consumer plans its reads per slice, so an absurd ``dp`` (say 2**40, read
#: from a tampered dataset.json) must be refused before anything is built.
MAX_DP = 2**16
MAX_CP = 2**16
MAX_SLICES = 2**20  # dp * cp

#: the key a reader derives from ``Layout.labels_from``: the one-token shift of that seq key
LABELS_KEY = "labels"


@dataclass(frozen=True)
class Layout:
    """How one global batch is cut into ``dp * cp`` slices.

    ``labels_from``: a seq key stored with one more token per row (``seq_len + 1``,
    each cp chunk with the token after it) from which readers derive ``labels``,
    its one-token shift: the two are views of the same bytes, so labels are
    never stored (``docs/format.md``, *Labels from tokens*).
    """

    dp: int = 1
    cp: int = 1
    seq_keys: tuple[str, ...] = ()
    cp_order: str = "contiguous"
    labels_from: str | None = None

    def __post_init__(self) -> None:
        for name in ("dp", "cp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LayoutError(f"Layout.{name} must be an int >= 1, got {value!r}")
        for name, value, limit in (("dp", self.dp, MAX_DP), ("cp", self.cp, MAX_CP)):
            if value > limit:
                raise LayoutError(f"Layout.{name}={value} exceeds the maximum {limit}")
        if self.dp * self.cp > MAX_SLICES:
            raise LayoutError(f"Layout dp*cp={self.dp * self.cp} slices exceeds the maximum {MAX_SLICES}")
        if isinstance(self.seq_keys, str):
            raise LayoutError(f"Layout.seq_keys must be a tuple of names, got the string {self.seq_keys!r}")
        keys = tuple(self.seq_keys)
        if not all(isinstance(k, str) and k for k in keys) or len(set(keys)) != len(keys):
            raise LayoutError(f"Layout.seq_keys must be distinct non-empty names, got {keys!r}")
        object.__setattr__(self, "seq_keys", keys)
        if self.labels_from is not None and (self.labels_from not in keys or LABELS_KEY in keys):
            raise LayoutError(
                f"Layout.labels_from={self.labels_from!r} must name one of the seq keys {keys!r}, "
                f"and {LABELS_KEY!r} must not be one (readers derive it)"
            )
        if self.cp_order not in CP_ORDERS:
            raise LayoutError(f"Layout.cp_order must be one of {CP_ORDERS}, got {self.cp_order!r}")

    @classmethod
    def token_rows(cls, dp: int = 1, cp: int = 1, *, cp_order: str = "contiguous") -> Layout:
        """The layout of token-efficient rows (``datapipes.Pack(rows="tokens")``): ``input_ids`` is the seq key,
        stored with the token after each row (``labels_from``); readers derive ``labels``."""
        return cls(dp=dp, cp=cp, seq_keys=("input_ids",), cp_order=cp_order, labels_from="input_ids")

    @property
    def num_slices(self) -> int:
        return self.dp * self.cp

    @property
    def seq_chunks(self) -> int:
        """Number of equal chunks the sequence dim must divide into."""
        return self.cp * (2 if self.cp_order == "zigzag" and self.cp > 1 else 1)

    def seq_len_of(self, key: str, stored: int) -> int:
        """The sequence length of seq key ``key`` whose rows hold ``stored`` tokens (one more for ``labels_from``)."""
        return stored - 1 if key == self.labels_from else stored

    def to_json(self) -> dict[str, Any]:
        """The JSON of ``dataset.json`` and footers; ``labels_from`` only when set (older readers refuse it)."""
        out: dict[str, Any] = {"dp": self.dp, "cp": self.cp, "seq_keys": list(self.seq_keys), "cp_order": self.cp_order}
        if self.labels_from is not None:
            out["labels_from"] = self.labels_from
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Layout:
        if not isinstance(d, Mapping):
            raise LayoutError(f"a layout must be a JSON object, got {type(d).__name__}")
        unknown = set(d) - {"dp", "cp", "seq_keys", "cp_order", "labels_from"}
        if unknown:
            raise LayoutError(f"unknown layout fields {sorted(unknown)}")
        seq_keys = d.get("seq_keys", ())
        if not isinstance(seq_keys, (list, tuple)):
            raise LayoutError(f"layout seq_keys must be a list, got {seq_keys!r}")
        labels_from = d.get("labels_from")
        if labels_from is not None and not isinstance(labels_from, str):
            raise LayoutError(f"layout labels_from must be a key name, got {labels_from!r}")
        return cls(
            dp=d.get("dp", 1), cp=d.get("cp", 1), seq_keys=tuple(seq_keys), cp_order=d.get("cp_order", "contiguous"),
            labels_from=labels_from,
        )

    def check_batch(self, batch: Mapping[str, torch.Tensor | Sequence[torch.Tensor]]) -> int:
        """Validate that ``batch`` can be cut; returns the global batch size.

        A value is a tensor (dim 0 = the batch) or, for a ragged key, a list of
        one tensor per row (:func:`~torch_tgb.layout.check_ragged`) or those rows
        joined (:class:`~torch_tgb.layout.RaggedRows`).
        """
        if not isinstance(batch, Mapping) or not batch:
            raise LayoutError("a global batch must be a non-empty dict of tensors")
        sizes = {}
        for name, t in batch.items():
            if isinstance(t, torch.Tensor):
                if t.dim() < 1:
                    raise LayoutError(f"tensor {name!r}: a 0-dim tensor has no batch dim 0")
                sizes[name] = t.shape[0]
            elif isinstance(t, (list, tuple, RaggedRows)):
                if name in self.seq_keys:
                    raise LayoutError(f"ragged key {name!r} cannot be a seq key (ragged keys are repeated in each cp slice)")
                sizes[name] = check_ragged(name, t)
                if offsets_key(name) in batch:
                    raise LayoutError(f"ragged key {name!r}: the batch also has {offsets_key(name)!r}, the name of its offsets")
            else:
                raise LayoutError(
                    f"tensor {name!r}: expected a torch.Tensor, a list of one tensor per row or RaggedRows, got {type(t).__name__}"
                )
        if len(set(sizes.values())) != 1:
            raise LayoutError(f"tensors disagree on the global batch size (dim 0): {sizes}")
        batch_size = next(iter(sizes.values()))
        if batch_size % self.dp:
            raise LayoutError(f"global batch size {batch_size} is not divisible by dp={self.dp}")
        for key in self.seq_keys:
            if key not in batch:
                raise LayoutError(f"seq key {key!r} is not in the batch (tensors: {sorted(batch)})")
            t = batch[key]
            assert isinstance(t, torch.Tensor)  # a ragged seq key was refused above
            if t.dim() < 2:
                raise LayoutError(f"seq key {key!r} needs a sequence dim 1, has shape {tuple(t.shape)}")
            length = self.seq_len_of(key, t.shape[1])
            if length % self.seq_chunks or length < 1:
                raise LayoutError(
                    f"seq key {key!r}: sequence length {length} is not divisible into "
                    f"{self.seq_chunks} chunks (cp={self.cp}, cp_order={self.cp_order!r})"
                    + (f" (it holds {length} + 1 tokens: labels_from)" if key == self.labels_from else "")
                )
        if LABELS_KEY in batch and self.labels_from is not None:
            raise LayoutError(f"a layout with labels_from={self.labels_from!r} derives {LABELS_KEY!r}: do not store it")
        return batch_size

    def cut(self, batch: Mapping[str, torch.Tensor | Sequence[torch.Tensor]]) -> list[SliceData]:
        """The ``dp * cp`` slices of ``batch`` in (dp, cp) order, dp-major.

        Slices are views where possible; zig-zag seq chunks are concatenated. A
        ragged key's rows of a dp part become one values tensor (the rows in
        order) and its offsets (:func:`~torch_tgb.layout.ragged_part`), repeated
        in every cp slice.
        """
        rows = self.check_batch(batch) // self.dp
        ranges = cp_ranges(self.cp, self.cp_order) if self.cp > 1 else [[(Fraction(0), Fraction(1))]]
        ragged = tuple(name for name, t in batch.items() if not isinstance(t, torch.Tensor))
        slices = []
        for d in range(self.dp):
            part: dict[str, torch.Tensor] = {}
            for name, t in batch.items():
                if isinstance(t, torch.Tensor):
                    part[name] = t[d * rows : (d + 1) * rows]
                else:
                    part[name], part[offsets_key(name)] = ragged_part(t[d * rows : (d + 1) * rows])
            for c in range(self.cp):
                tensors = {}
                for name, t in part.items():
                    if name in self.seq_keys and self.cp > 1:
                        n = self.seq_len_of(name, t.shape[1])
                        more = int(name == self.labels_from)  # each chunk keeps the token after it
                        chunks = [t[:, int(lo * n) : int(hi * n) + more] for lo, hi in ranges[c]]
                        tensors[name] = chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=1)
                    else:
                        tensors[name] = t
                slices.append(SliceData(d, c, tensors, ragged))
        return slices
