"""``Balancer``: where each row of a global batch goes (dp rank, micro-batch), as a pure value.

A :class:`Balancer` is a balancing method (a name in
``transforms.balance.BALANCERS``, or ``None`` for arrival order) with the cut
it plans for: ``dp`` ranks of ``micro_batches`` micro-batches each.
:meth:`Balancer.plan` turns the rows' costs into ``plan[rank][micro]``, the
row indices (ascending) of each micro-batch, every row exactly once and every
micro-batch the same count (OVERLORD Alg. 1/2: the rows into ``dp·m`` bins
with the method, then the bins into ``dp`` groups of ``m`` by their totals).
``datapipes.GlobalBatches`` prices the rows, asks the plan and applies it;
nothing here knows tensors or nodes, so the plan is tested on its own.

What rows cost is a table, float64 ``[rows, 3]`` of (total, encoder,
backbone): :func:`price_rows` prices rows by a :data:`RowCost`
(``"attention"``: ``Σ len² + alpha·len`` over a row's documents; a function
of the row; a :class:`PhasedCost`, as ``transforms.VLMCost``, whose two
phases a method registered with ``phases=True``, ``"vector"``, balances), and
:func:`price_lengths` prices token rows from their ``seq_lens`` at once. :func:`plan_imbalances` says how even a plan came out (max / mean
per slice, per micro-batch, per phase).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import torch

from torch_tgb.errors import LayoutError
from torch_tgb.transforms.balance import BALANCERS, BalanceMethod, Partition, part_costs, row_costs
from torch_tgb.transforms.derive import SEQ_LENS_KEY

__all__ = [
    "Balancer",
    "PhasedCost",
    "Plan",
    "RowCost",
    "attention_cost",
    "imbalance",
    "plan_imbalances",
    "price_lengths",
    "price_rows",
]

Plan = list[list[list[int]]]  # plan[rank][micro] = row indices, ascending
#: what a row costs: ``"attention"``, or a function of the row's tensors (a :class:`PhasedCost` for two phases)
RowCost = str | Callable[[Mapping[str, torch.Tensor]], float]


@runtime_checkable
class PhasedCost(Protocol):
    """A row cost in two phases (encoder, backbone) and their combination, as ``transforms.VLMCost`` is."""

    def parts(self, row: Mapping[str, Any]) -> tuple[float, float]: ...

    def cost(self, encoder: float, backbone: float) -> float: ...


def imbalance(costs: Sequence[float] | np.ndarray) -> float:
    """max / mean of ``costs`` (1.0 = perfect; 1.0 for no cost at all)."""
    values = np.asarray(costs, dtype=np.float64).reshape(-1)
    mean = float(values.mean()) if values.size else 0.0
    return float(values.max()) / mean if mean > 0 else 1.0


@dataclass(frozen=True)
class Balancer:
    """A balancing method over ``dp`` ranks x ``micro_batches`` micro-batches; :meth:`plan` is pure.

    ``method``: a name registered in ``BALANCERS`` (an unknown one is refused
    here, listing those there are), or ``None`` to keep arrival order (rank
    ``r`` the ``r``-th block of rows, micro-batch ``k`` the ``k``-th block of that).
    """

    method: str | None = None
    dp: int = 1
    micro_batches: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "micro_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LayoutError(f"Balancer {name} must be an int >= 1, got {value!r}")
        if self.method is not None:
            BALANCERS[self.method]  # an unknown name: RegistryError listing the names

    @property
    def phases(self) -> bool:
        """Whether the method balances per-phase costs (``plan(..., phases=)`` needed)."""
        return self.method is not None and BALANCERS[self.method].phases

    def plan(self, costs: Sequence[float] | np.ndarray, phases: np.ndarray | None = None) -> Plan:
        """``plan[rank][micro]``: the rows of each micro-batch for rows costing ``costs`` (float ``[n]``).

        ``phases``: the rows' per-phase costs ``[n, 2]`` (encoder, backbone),
        which a ``phases`` method needs. Needs ``n % (dp·micro_batches) == 0``.
        A method's partition is checked: every row exactly once, equal counts.
        """
        values = np.asarray(costs, dtype=np.float64).reshape(-1)
        n, dp, m = len(values), self.dp, self.micro_batches
        bins = dp * m
        if n % bins:
            raise LayoutError(f"{n} rows cannot be cut into dp={dp} x micro_batches={m} equal parts")
        if self.method is None:
            size = n // bins
            return [[list(range((r * m + k) * size, (r * m + k + 1) * size)) for k in range(m)] for r in range(dp)]
        method = BALANCERS[self.method]
        if method.phases:
            if phases is None:
                raise ValueError(f"balance method {self.method!r} balances per-phase costs: pass phases= (the rows' "
                                 "encoder and backbone costs, [n, 2]; GlobalBatches needs cost=VLMCost(...))")
            parts = _checked(method(np.asarray(phases, dtype=np.float64).reshape(n, -1), bins), n, bins, self.method)
            group: BalanceMethod = BALANCERS["kk"]  # the bins' totals: one number each
        else:
            parts = _checked(method(values, bins), n, bins, self.method)
            group = method
        if m == 1:
            return [[parts[r]] for r in range(dp)]
        groups = _checked(group(part_costs(values, parts), dp), bins, dp, self.method)
        # inside a rank, micro-batches in the order of their first row: deterministic, close to arrival order
        return [sorted((parts[b] for b in g), key=lambda rows: rows[0] if rows else -1) for g in groups]


def _checked(partition: Partition, n: int, parts: int, method: str) -> Partition:
    """``partition`` with each part ascending, if it holds each of ``range(n)`` once in ``parts`` equal parts."""
    out = [sorted(p) for p in partition]
    size = n // parts
    # equal counts make n indices; n distinct ones in [0, n) are each row once
    if (len(out) != parts or any(len(p) != size for p in out)
            or (n and (len({i for p in out for i in p}) != n or min(p[0] for p in out) < 0
                       or max(p[-1] for p in out) >= n))):
        raise LayoutError(f"balance method {method!r} returned no partition of {n} rows into {parts} parts of "
                          f"{n // parts}: every row must be in exactly one part, every part the same count")
    return out


def price_lengths(lengths: np.ndarray, counts: Sequence[int] | np.ndarray, *, alpha: float = 0.0,
                  size: int | None = None) -> np.ndarray:
    """The cost table ``[size, 3]`` of token rows: ``Σ len² + alpha·len`` over each row's ``seq_lens``.

    ``counts[r]`` of ``lengths`` (in row order) are row ``r``'s; rows after
    the last counted (padding) cost 0; ``size`` defaults to ``len(counts)``.
    Total = backbone, encoder 0.
    """
    flat = np.asarray(lengths).astype(np.float64)
    rows = len(counts)
    out = np.zeros((rows if size is None else size, 3), dtype=np.float64)
    out[:rows, 0] = np.bincount(np.repeat(np.arange(rows), counts), weights=flat * flat + alpha * flat,
                                minlength=rows)
    out[:, 2] = out[:, 0]
    return out


def attention_cost(row: Mapping[str, torch.Tensor], *, alpha: float) -> float:
    """``Σ len² + alpha·len`` over the documents of ``row`` (its ``seq_lens``, or from its ``document_ids``)."""
    if SEQ_LENS_KEY in row:
        lens = row[SEQ_LENS_KEY].numpy().astype(np.int64)
        return float((lens * lens).sum() + alpha * lens.sum())
    if "document_ids" not in row:
        raise LayoutError(f"cost='attention' needs rows with seq_lens or document_ids (row has {sorted(row)}); "
                          "pass cost=callable")
    ids = row["document_ids"].reshape(-1)
    lengths = torch.bincount(ids[ids >= 0].to(torch.int64)).numpy() if bool((ids >= 0).any()) else np.zeros(0)
    return float(row_costs([lengths], alpha=alpha)[0])


def price_rows(rows: Sequence[Mapping[str, torch.Tensor]], cost: RowCost, *, alpha: float = 0.0,
               size: int | None = None) -> np.ndarray:
    """The cost table ``[size, 3]`` (total, encoder, backbone) of ``rows``; rows past them (padding) cost 0.

    ``cost="attention"`` over rows that all carry ``seq_lens`` is priced at
    once (:func:`price_lengths`); otherwise row by row: a :class:`PhasedCost`
    gives both phases, any other cost is all backbone.
    """
    size = len(rows) if size is None else size
    if cost == "attention" and all(SEQ_LENS_KEY in r for r in rows):
        lens = [r[SEQ_LENS_KEY].numpy() for r in rows]
        flat = np.concatenate(lens) if lens else np.zeros(0, dtype=np.int32)
        return price_lengths(flat, [len(x) for x in lens], alpha=alpha, size=size)
    if not callable(cost) and cost != "attention":
        raise ValueError(f"cost must be 'attention' or a callable row -> float, got {cost!r}")
    out = np.zeros((size, 3), dtype=np.float64)
    if isinstance(cost, PhasedCost):  # once per batch: a Protocol check is slow
        phased = cast(PhasedCost, cost)
        for i, row in enumerate(rows):
            encoder, backbone = phased.parts(row)
            out[i] = (phased.cost(encoder, backbone), encoder, backbone)
        return out
    for i, row in enumerate(rows):
        value = float(cost(row)) if callable(cost) else attention_cost(row, alpha=alpha)
        out[i] = (value, 0.0, value)
    return out


def plan_imbalances(costs: np.ndarray, plan: Plan) -> dict[str, Any]:
    """How even ``plan`` is for rows priced ``costs`` (``[n, 3]``: total, encoder, backbone).

    ``slice_costs`` (the dp slices' totals, in order), ``imbalance`` (max / mean
    of those), ``encoder`` / ``backbone`` (the same per phase) and ``micro``
    (max / mean over every micro-batch of every slice).
    """
    order = [i for rank in plan for micro in rank for i in micro]
    ordered = costs[order]
    # every micro-batch of a plan holds as many rows: their sums, and the slices', by reshaping
    micro_sums = ordered.reshape(sum(len(rank) for rank in plan), -1, costs.shape[1]).sum(axis=1)
    slice_sums = micro_sums.reshape(len(plan), -1, costs.shape[1]).sum(axis=1)
    return {"slice_costs": slice_sums[:, 0].tolist(), "imbalance": imbalance(slice_sums[:, 0]),
            "encoder": imbalance(slice_sums[:, 1]), "backbone": imbalance(slice_sums[:, 2]),
            "micro": imbalance(micro_sums[:, 0])}
