"""Documents -> packed rows -> global batches: the text pipeline as one value and one function.

:class:`Batching` says how documents become global batches (packing into rows
of ``seq_len`` tokens, ``global_batch_size`` rows a batch, optional cost
balancing over the dp slices); :func:`document_batches` chains ``Pack`` and
``GlobalBatches`` with it over any document node (a source, a ``Mix``).
``write_dataset``, ``tgb produce --source`` and user pipelines all build their
batches here, so a namespace's rows are the same whoever wrote them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb._options import with_fields
from torch_tgb.datapipes.produce.global_batches import GlobalBatches
from torch_tgb.datapipes.produce.pack import METHODS, ROW_FORMATS, Pack
from torch_tgb.layout import Layout
from torch_tgb.transforms.balance import BALANCERS

__all__ = ["Batching", "BatchingSettings", "document_batches", "token_dtype_for"]


@dataclass(frozen=True)
class Batching:
    """How documents become global batches.

    ``packing``: ``"bfd"`` (best-fit decreasing), ``"concat"`` or ``"none"``
    (concat-and-chunk; ``None`` means ``"none"``), over windows of
    ``packing_window`` documents. ``rows``: ``"tokens"`` (each token once, at
    ``token_dtype``, with the rows' ``seq_lens``; readers derive labels and
    the rest) or ``"arrays"`` (the per-token arrays of older namespaces:
    ``input_ids`` at ``token_dtype``, ``labels``, ``document_ids``,
    ``position_ids``, and ``cu_seqlens``/``max_seqlen`` with
    ``attention_metadata``). ``token_dtype``: ``None`` is, for token rows, the
    narrowest for the source (:func:`token_dtype_for` its ``token_dtype``:
    uint16 for a ``TokenFile`` or Arrow column of uint16 ids, else uint32; a
    caller that knows the vocabulary fits picks uint16) and int64 for arrays;
    an id it cannot hold is an error, never wrapped. ``balance``: ``None``,
    ``"greedy"``, ``"kk"`` or any name in ``transforms.BALANCERS`` over the dp
    slices, cost ``Σ len² + alpha·len`` per row (packed rows only).
    """

    seq_len: int
    global_batch_size: int
    packing: str | None = "bfd"
    rows: str = "tokens"
    token_dtype: torch.dtype | None = None
    pad_id: int = 0
    packing_window: int = 1024
    balance: str | None = None
    alpha: float = 0.0
    attention_metadata: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "packing", "none" if self.packing is None else self.packing)
        for name in ("seq_len", "global_batch_size", "packing_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.packing not in METHODS:
            raise ValueError(f"packing must be one of {list(METHODS)} or None, got {self.packing!r}")
        if self.rows not in ROW_FORMATS:
            raise ValueError(f"rows must be one of {ROW_FORMATS}, got {self.rows!r}")
        if self.balance is not None:
            BALANCERS[self.balance]  # an unknown method: RegistryError listing the registered ones
        if self.balance is not None and self.packing == "none":
            raise ValueError(f"balance={self.balance!r} needs packed rows (packing 'bfd' or 'concat'): "
                             "concat-and-chunk rows are one sequence each and all cost the same")
        if self.attention_metadata and self.rows == "tokens":
            raise ValueError("attention_metadata applies to rows='arrays'; token rows derive cu_seqlens on read "
                             "(ReaderOptions(derive=('cu_seqlens',)))")

    def keys(self) -> tuple[str, ...]:
        """The seq keys of the rows (what the layout cuts along the sequence)."""
        return ("input_ids",) if self.rows == "tokens" else ("input_ids", "labels", "document_ids", "position_ids")

    def layout(self, dp: int = 1, cp: int = 1, *, cp_order: str = "contiguous") -> Layout:
        """The layout these rows are written with, cut ``dp`` x ``cp``."""
        if self.rows == "tokens":
            return Layout.token_rows(dp, cp, cp_order=cp_order)
        return Layout(dp=dp, cp=cp, seq_keys=self.keys(), cp_order=cp_order)

    def for_layout(self, layout: Layout) -> Layout:
        """``layout``'s cut (dp, cp, cp order) with these rows' keys: what a caller's ``Layout(dp=...)`` means here."""
        return self.layout(layout.dp, layout.cp, cp_order=layout.cp_order)

    def with_settings(self, settings: Mapping[str, object]) -> Batching:
        """These options with ``settings`` (field name -> value) replacing fields; unknown names are a TypeError."""
        return with_fields(self, settings, "batching")



class BatchingSettings(TypedDict, total=False):
    """The fields of :class:`Batching` as keyword arguments (``write_dataset``, ``document_batches``)."""

    seq_len: int
    global_batch_size: int
    packing: str | None
    rows: str
    token_dtype: torch.dtype | None
    pad_id: int
    packing_window: int
    balance: str | None
    alpha: float
    attention_metadata: bool


def document_batches(
    docs: BaseNode[Any],
    batching: Batching | None = None,
    *,
    layout: Layout | None = None,
    info: Mapping[str, Any] | None = None,
    **settings: Any,
) -> GlobalBatches:
    """Documents (1-D token arrays/tensors, or ``{"tokens": ...}`` dicts) -> rows -> global batches.

    ``batching`` (or its fields as keywords: ``seq_len=``, ``global_batch_size=``,
    ``packing=``, ...) says how; ``layout`` gives the dp slices (default one:
    its dp, cp and cp order are kept, its keys are the rows'). ``docs`` may be a
    ``datapipes.Mix`` of several sources. ``info`` is a small JSON object the
    pipeline's state carries unchanged (what produced a namespace).
    """
    if batching is None:
        missing = [k for k in ("seq_len", "global_batch_size") if k not in settings]
        if missing:
            raise TypeError(f"document_batches needs {missing} (or batching=Batching(...))")
        b = Batching(seq_len=settings.pop("seq_len"), global_batch_size=settings.pop("global_batch_size"))
        b = b.with_settings(settings)
    else:
        b = batching.with_settings(settings)
    dtype = b.token_dtype
    if dtype is None:
        dtype = token_dtype_for(getattr(docs, "token_dtype", None)) if b.rows == "tokens" else torch.int64
    rows = Pack(docs, b.seq_len, window=b.packing_window, pad_id=b.pad_id, method=str(b.packing),
                attention_metadata=b.attention_metadata, rows=b.rows, token_dtype=dtype)
    return GlobalBatches(
        rows, global_batch_size=b.global_batch_size, layout=b.for_layout(layout or Layout(dp=1)), balance=b.balance,
        alpha=b.alpha, pad_id=b.pad_id, info=info,
    )


def token_dtype_for(stored: np.dtype | None) -> torch.dtype:
    """The token-row dtype for ids a source stores as ``stored``: uint16 for 8/16-bit unsigned ids, else uint32."""
    narrow = stored is not None and np.dtype(stored).kind == "u" and np.dtype(stored).itemsize <= 2
    return torch.uint16 if narrow else torch.uint32
