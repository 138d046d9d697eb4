"""GlobalBatches: packed rows -> the global batches a Producer appends, optionally cost-balanced.

Reads ``global_batch_size`` rows (dicts of equally shaped tensors, as ``Pack``
yields them) and stacks them into one ``dict[str, Tensor]`` with dim 0 = the
global batch. ``Layout.cut`` gives dp slice ``d`` the contiguous block of
rows ``[d * B/dp, (d + 1) * B/dp)``. A short last batch is filled with
padding rows (``input_ids`` ``pad_id``, ``position_ids`` 0, ``labels``
-100, ``document_ids`` -1, ``cu_seqlens`` one padding segment,
``max_seqlen`` = seq_len; any other tensor zeros), so no token is dropped.
``keys`` (default: all) picks the row fields that go into the batch, so a
row stage may carry ``document_ids`` for counting and costs only.

**Ragged fields.** A field named in ``ragged`` (default: the rows source's
``ragged_keys``, as ``PackSamples`` has them) may have any length along its
first dim in each row: the batch holds it as :class:`~torch_tgb.layout.RaggedRows`
(a sequence of one tensor per row, in batch order, a padding row's empty,
held joined as values plus offsets), which ``Producer.append`` stores as a
ragged key without a step per row.

**Tokens.** Real tokens are counted from a token row's ``seq_lens`` (what
``Pack`` writes by default), else from ``document_ids >= 0`` (per-token rows,
``Pack(rows="arrays")``); a row with neither counts all of its ``input_ids``.

**Balance.** The rows are priced by the pure ``transforms.price_rows`` and
planned by a pure ``transforms.Balancer``; this node applies the plan: with ``balance="greedy"``, ``"kk"`` or any name
registered in ``transforms.BALANCERS`` (a plugin's too) rows are permuted so
every dp slice gets ``B/dp`` rows and the largest slice cost is small. ``cost="attention"``: ``Σ len² + alpha·len`` over the
documents of a row (lengths from ``seq_lens`` or ``document_ids``); or any callable
``row -> float``. The batch then also carries:

- ``row_index`` (int64 ``[B]``): each row's position in arrival order (the
  permutation; padding rows come last in arrival order). Inside a slice the
  rows keep their arrival order, so ``argsort(row_index)`` undoes it.
- ``row_cost`` (float64 ``[B]``): each row's cost; a slice's cost is the sum
  over its rows, so every rank can compute its own.

**Micro-batches and VLM cost.** ``micro_batches=m`` also balances inside each
slice (``Balancer(balance, dp, m).plan``): a slice's ``B/dp`` rows
are ``m`` consecutive micro-batches of ``B/(dp·m)`` rows, each carrying about
``1/(dp·m)`` of the batch's cost (``B`` must be a multiple of ``dp·m``).
A cost with phases (``transforms.PhasedCost``, as ``transforms.VLMCost``)
costs a row as encoder (its images' patches) plus backbone (its documents)
and reports the two imbalances separately in ``BatchStats``; with it,
``balance="vector"`` (a method of per-phase costs) evens out both parts at
once instead of their sum.

``stats()`` (:class:`BatchStats`) reports the slice costs of the last batch
and the mean imbalance (max/mean slice cost) so far.

State: the rows source's state after the last batch (nothing is buffered
between batches; once the source has ended, its final state, and it is not
reset again), the counters (``batches``, ``rows``, ``padding_rows``,
``tokens``, restored with the state so a resumed run reports totals), a
``done`` flag and ``info`` (a small JSON object stored unchanged, e.g. what
produced a namespace). ``state_dict()`` taken right after batch ``k`` is the
state to resume at batch ``k + 1`` (``tgb.produce`` commits it with offset ``k``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from torch_tgb.datapipes.produce._one_thread import cat_rows, take_rows
from torch_tgb.datapipes.produce._steer import mix_of
from torch_tgb.datapipes.produce._row_fields import pad_row, real_tokens
from torch_tgb.errors import LayoutError
from torch_tgb.layout import RaggedRows
from torch_tgb.transforms.balancer import Balancer, PhasedCost, Plan, RowCost, plan_imbalances, price_lengths, price_rows
from torch_tgb.transforms.derive import SEQ_LENS_KEY

if TYPE_CHECKING:
    from torch_tgb.layout import Layout

__all__ = ["BatchStats", "GlobalBatches"]


@dataclass(frozen=True)
class BatchStats:
    """Global batches assembled so far and the balance of the last one."""

    batches: int = 0
    rows: int = 0
    padding_rows: int = 0
    #: real tokens (``document_ids >= 0``) in the rows so far
    tokens: int = 0
    #: cost of each dp slice of the last batch, in slice order
    slice_costs: list[float] = field(default_factory=list)
    #: max / mean slice cost of the last batch (1.0 = perfect balance)
    imbalance: float = 1.0
    #: mean of ``imbalance`` over all batches so far
    mean_imbalance: float = 1.0
    #: with a ``VLMCost``: max / mean over the dp slices of the encoder and of the backbone cost, last batch
    encoder_imbalance: float = 1.0
    backbone_imbalance: float = 1.0
    #: means of the two over all batches so far
    mean_encoder_imbalance: float = 1.0
    mean_backbone_imbalance: float = 1.0
    #: max / mean cost over the dp x micro_batches micro-batches of the last batch, and its mean so far
    micro_imbalance: float = 1.0
    mean_micro_imbalance: float = 1.0


class GlobalBatches(BaseNode[dict[str, torch.Tensor]]):
    """Stacks ``global_batch_size`` rows into one global batch; see the module docstring."""

    SOURCE_KEY = "source"
    BATCHES_KEY = "batches"
    COUNTS = ("batches", "rows", "padding_rows", "tokens")
    DONE_KEY = "done"
    INFO_KEY = "info"

    def __init__(
        self,
        rows: BaseNode[Mapping[str, torch.Tensor]],
        *,
        global_batch_size: int,
        layout: Layout,
        balance: str | None = None,
        cost: RowCost = "attention",
        alpha: float = 0.0,
        pad_id: int = 0,
        keys: Sequence[str] | None = None,
        info: Mapping[str, Any] | None = None,
        ragged: Sequence[str] | None = None,
        micro_batches: int = 1,
    ) -> None:
        super().__init__()
        if not isinstance(global_batch_size, int) or global_batch_size < 1:
            raise LayoutError(f"global_batch_size must be an int >= 1, got {global_batch_size!r}")
        if global_batch_size % layout.dp:
            raise LayoutError(
                f"global_batch_size={global_batch_size} is not divisible by dp={layout.dp}: "
                f"every dp slice must get the same number of rows"
            )
        if not isinstance(micro_batches, int) or micro_batches < 1 or global_batch_size % (layout.dp * micro_batches):
            raise LayoutError(f"global_batch_size={global_batch_size} is not divisible by dp={layout.dp} x "
                              f"micro_batches={micro_batches}: every micro-batch must get the same number of rows")
        self.balancer = Balancer(balance, layout.dp, micro_batches)  # an unknown name: the error lists them
        if self.balancer.phases and not isinstance(cost, PhasedCost):
            raise ValueError(f"balance={balance!r} balances a cost's encoder and backbone phases: pass "
                             "cost=VLMCost(...) (or another transforms.PhasedCost)")
        if not callable(cost) and cost != "attention":
            raise ValueError(f"cost must be 'attention' or a callable row -> float, got {cost!r}")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.source = rows
        self.global_batch_size = global_batch_size
        self.layout = layout
        self.balance = balance
        self.cost = cost
        self.alpha = alpha
        self.pad_id = pad_id
        self.keys = None if keys is None else tuple(keys)
        self.info = dict(info or {})
        self.ragged = None if ragged is None else tuple(ragged)
        self.micro_batches = micro_batches
        self._counts = dict.fromkeys(self.COUNTS, 0)
        self._done = False
        self._final: Any = None  # the source's state once it ended
        self._slice_costs: list[float] = []
        self._imbalance_sum = 0.0
        self._counted = 0  # batches since the last reset, for mean_imbalance
        self._last: dict[str, float] = {}  # the last batch's encoder/backbone/micro imbalance
        self._sums: dict[str, float] = {}

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        state = initial_state or {}
        self._slice_costs = []
        self._imbalance_sum = 0.0
        self._counted = 0
        self._last, self._sums = {}, {}
        self._counts = {k: int(state.get(k, 0)) for k in self.COUNTS}
        self._done = bool(state.get(self.DONE_KEY, False))
        self._final = state.get(self.SOURCE_KEY) if self._done else None
        if not self._done:  # a finished source is not reset again: nothing is left to read
            self.source.reset(state.get(self.SOURCE_KEY))

    @property
    def mix(self) -> Any:
        """The ``Mix`` below (None: none): ``tgb.produce`` records its control version, fleets read its stats."""
        return mix_of(self.source)

    def get_state(self) -> dict[str, Any]:
        source = self._final if self._done else self.source.state_dict()
        return {self.SOURCE_KEY: source, **self._counts, self.DONE_KEY: self._done, self.INFO_KEY: self.info}

    def _tokens(self, rows: Sequence[Mapping[str, torch.Tensor]]) -> int:
        """The real tokens of ``rows``: their ``seq_lens`` summed at once where they all carry them."""
        if rows and all(SEQ_LENS_KEY in r for r in rows):
            return int(np.concatenate([r[SEQ_LENS_KEY].numpy() for r in rows]).sum())
        return sum(real_tokens(r) for r in rows)

    def _ragged_keys(self) -> tuple[str, ...]:
        if self.ragged is not None:
            return self.ragged
        return tuple(getattr(self.source, "ragged_keys", ()))

    def next(self) -> dict[str, torch.Tensor]:
        if self._done:
            raise StopIteration
        blocks, priced = self._take_blocks()
        if priced and blocks and (sum(b.rows for b in blocks) == self.global_batch_size or self._done):
            return self._from_blocks(blocks)
        rows: list[Mapping[str, torch.Tensor]] = [b.row(i) for b in blocks for i in range(b.rows)]
        while len(rows) < self.global_batch_size and not self._done:
            try:
                rows.append(next(self.source))
            except StopIteration:
                self._end()
        if not rows:
            raise StopIteration
        real = len(rows)
        ragged = self._ragged_keys()
        parts = price_rows(rows, self.cost, alpha=self.alpha, size=self.global_batch_size)
        tokens = self._tokens(rows)
        rows.extend(pad_row(rows[0], self.pad_id, ragged) for _ in range(self.global_batch_size - real))
        plan = self._plan(parts)
        order = [i for rank in plan for micro in rank for i in micro]
        names = self._names(list(rows[0]))
        batch: dict[str, Any] = {
            name: RaggedRows.from_rows(name, [rows[i][name] for i in order]) if name in ragged
            else torch.stack([rows[i][name] for i in order])
            for name in names
        }
        return self._finish(batch, parts, plan, real, tokens)

    def _end(self) -> None:
        self._done = True
        self._final = self.source.state_dict()

    def _take_blocks(self) -> tuple[list[Any], bool]:
        """This batch's rows as blocks, where the source hands out rows in blocks (``Pack.take_rows``).

        Only for the default cost (priced from ``seq_lens`` at once). Also
        whether the blocks make the batch as blocks: False where a block
        cannot be priced at once or carries a ragged field the batch would
        stack, or where a block source stops handing out blocks mid-batch;
        the rows taken so far then go the row-by-row way.
        """
        take = getattr(self.source, "take_rows", None)
        if take is None or self.cost != "attention":
            return [], False
        blocks: list[Any] = []
        have = 0
        while have < self.global_batch_size:
            block = take(self.global_batch_size - have)
            if block is None:
                return blocks, False
            if block.rows == 0:
                self._end()
                break
            blocks.append(block)
            have += block.rows
            if SEQ_LENS_KEY not in block.ragged or set(block.ragged) - set(self._ragged_keys()):
                return blocks, False
        return blocks, True

    def _from_blocks(self, blocks: list[Any]) -> dict[str, Any]:
        """The batch of rows held as blocks: one gather per dense field, one split per ragged field."""
        size = self.global_batch_size
        real = sum(b.rows for b in blocks)
        first = blocks[0]
        ragged_names = list(first.ragged)
        pad = pad_row(first.row(0), self.pad_id, ragged_names) if real < size else {}
        dense: dict[str, torch.Tensor] = {}
        for name in first.dense:
            parts = [b.dense[name] for b in blocks]
            if real < size:
                parts.append(pad[name].unsqueeze(0).expand(size - real, *pad[name].shape))
            dense[name] = parts[0] if len(parts) == 1 else cat_rows(parts)
        values: dict[str, torch.Tensor] = {}
        lengths: dict[str, np.ndarray] = {}
        for name in ragged_names:
            vals = [b.ragged[name][0] for b in blocks]
            values[name] = vals[0] if len(vals) == 1 else torch.cat(vals)
            lens = np.concatenate([np.diff(b.ragged[name][1]) for b in blocks])
            lengths[name] = np.concatenate([lens, np.zeros(size - real, dtype=lens.dtype)])
        seq_lens = values[SEQ_LENS_KEY].numpy()
        parts_costs = price_lengths(seq_lens, lengths[SEQ_LENS_KEY], alpha=self.alpha, size=size)
        plan = self._plan(parts_costs)
        order = [i for rank in plan for micro in rank for i in micro]
        reordered = order != list(range(size))
        batch: dict[str, Any] = {}
        for name in self._names([*first.dense, *ragged_names]):
            if name in dense:
                batch[name] = take_rows(dense[name], order) if reordered else dense[name]
            elif not reordered:  # the rows joined as they are: no tensor per row
                batch[name] = RaggedRows.from_lengths(values[name], lengths[name])
            else:
                rows = values[name].split(lengths[name].tolist())
                batch[name] = RaggedRows.from_lengths(torch.cat([rows[i] for i in order]), lengths[name][order])
        return self._finish(batch, parts_costs, plan, real, int(seq_lens.sum()))

    def _plan(self, parts: np.ndarray) -> Plan:
        """Each dp slice's micro-batches of rows (row indices) for rows priced ``parts`` (cost, encoder, backbone)."""
        return self.balancer.plan(parts[:, 0], parts[:, 1:] if self.balancer.phases else None)

    def _names(self, fields: list[str]) -> list[str]:
        """The fields that go into the batch (``keys``, default all of the rows')."""
        if self.keys is None:
            return fields
        missing = [k for k in self.keys if k not in fields]
        if missing:
            raise LayoutError(f"GlobalBatches(keys=): rows have no {missing} (they have {sorted(fields)})")
        return list(self.keys)

    def _finish(self, batch: dict[str, Any], parts: np.ndarray, plan: Plan, real: int,
                tokens: int) -> dict[str, Any]:
        """``batch`` (rows in ``plan``'s order) with the balance's ``row_index``/``row_cost``; counters updated."""
        if self.balance is not None:
            order = [i for rank in plan for micro in rank for i in micro]
            batch["row_index"] = torch.tensor(order, dtype=torch.int64)
            batch["row_cost"] = torch.from_numpy(np.ascontiguousarray(parts[order, 0]))
        even = plan_imbalances(parts, plan)
        self._slice_costs = even["slice_costs"]
        self._imbalance_sum += even["imbalance"]
        self._counted += 1
        self._last = {name: even[name] for name in ("encoder", "backbone", "micro")}
        for name, value in self._last.items():
            self._sums[name] = self._sums.get(name, 0.0) + value
        self._counts["batches"] += 1
        self._counts["rows"] += real
        self._counts["padding_rows"] += self.global_batch_size - real
        self._counts["tokens"] += tokens
        return batch

    def stats(self) -> BatchStats:
        last = self._slice_costs
        mean = sum(last) / len(last) if last else 0.0
        return BatchStats(
            batches=self._counts["batches"],
            rows=self._counts["rows"],
            padding_rows=self._counts["padding_rows"],
            tokens=self._counts["tokens"],
            slice_costs=list(last),
            imbalance=max(last) / mean if mean > 0 else 1.0,
            mean_imbalance=self._imbalance_sum / self._counted if self._counted else 1.0,
            encoder_imbalance=self._last.get("encoder", 1.0),
            backbone_imbalance=self._last.get("backbone", 1.0),
            mean_encoder_imbalance=self._mean("encoder"),
            mean_backbone_imbalance=self._mean("backbone"),
            micro_imbalance=self._last.get("micro", 1.0),
            mean_micro_imbalance=self._mean("micro"),
        )

    def _mean(self, name: str) -> float:
        return self._sums[name] / self._counted if self._counted and name in self._sums else 1.0
