"""Cost balancing: split the rows of a global batch into ``parts`` dp slices of equal count.

A dp group steps at the pace of its slowest slice, so the slices should carry
equal compute, not just equal rows (OVERLORD §4, seed 004). The cost of a
packed row is :func:`row_costs`: Σ over its documents of ``len²`` (attention
inside a document: block-diagonal masks make it quadratic per document, not
per row) plus ``alpha·len`` (everything linear in tokens: projections, MLP).

Every balancer is pure, returns a partition as a list of ``parts`` index
lists of equal length (each list in ascending index order, i.e. the rows keep
their arrival order inside a slice) and needs ``len(costs) % parts == 0``:

- :func:`balance_round_robin`: row ``i`` to slice ``i % parts``; the baseline.
- :func:`balance_greedy`: longest-processing-time first with equal
  cardinality: rows by decreasing cost, each to the lightest slice that is
  not full yet.
- :func:`balance_kk`: Karmarkar–Karp largest differencing, balanced
  multi-way variant (BLDM): sorted rows are cut into tuples of ``parts``
  singletons; the two partial partitions with the largest spread are merged
  (heaviest subset of one with the lightest of the other) until one is left.
  Every subset grows by one row per merge, so counts stay equal.

They are registered by name in :data:`BALANCERS` (``"round_robin"``,
``"greedy"``, ``"kk"``; ``transforms.vlm_balance`` adds ``"vector"``), which
``GlobalBatches(balance=...)``, ``Batching``, ``tgb produce --balance`` and
:class:`~torch_tgb.transforms.balancer.Balancer` read: a new method is one
``BALANCERS.register(name, fn)`` (or an entry point in group
``torch_tgb.balancers``) with ``fn(costs, parts) -> partition``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from torch_tgb._registry import Registry
from torch_tgb.errors import LayoutError, RegistryError

__all__ = [
    "BALANCERS",
    "BalanceMethod",
    "balance",
    "balance_greedy",
    "balance_kk",
    "balance_round_robin",
    "max_cost",
    "part_costs",
    "row_costs",
]

Partition = list[list[int]]


def row_costs(doc_lengths_per_row: Sequence[Sequence[int] | np.ndarray], *, alpha: float = 0.0) -> np.ndarray:
    """Cost of each row: Σ ``len² + alpha·len`` over the documents (spans) in it; float64."""
    if alpha < 0 or not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite and >= 0, got {alpha}")
    out = np.zeros(len(doc_lengths_per_row), dtype=np.float64)
    for r, lengths in enumerate(doc_lengths_per_row):
        arr = np.asarray(lengths, dtype=np.float64).reshape(-1)
        if (arr < 0).any():
            raise ValueError(f"row {r}: document lengths must be >= 0")
        out[r] = float(np.sum(arr * arr + alpha * arr))
    return out


def _check(costs: Sequence[float] | np.ndarray, parts: int) -> list[float]:
    if not isinstance(parts, int) or parts < 1:
        raise LayoutError(f"parts must be an int >= 1, got {parts!r}")
    values = [float(c) for c in np.asarray(costs, dtype=np.float64).reshape(-1)]
    if len(values) % parts:
        raise LayoutError(
            f"{len(values)} rows cannot be split into {parts} slices of equal count "
            f"(the number of rows must be a multiple of the number of slices)"
        )
    if any(not math.isfinite(c) or c < 0 for c in values):
        raise ValueError("row costs must be finite and >= 0")
    return values


def part_costs(costs: Sequence[float] | np.ndarray, partition: Sequence[Sequence[int]]) -> list[float]:
    """Total cost of each part."""
    c = np.asarray(costs, dtype=np.float64).reshape(-1)
    return [float(c[list(p)].sum()) if len(p) else 0.0 for p in partition]


def max_cost(costs: Sequence[float] | np.ndarray, partition: Sequence[Sequence[int]]) -> float:
    """The largest part cost: what a dp group waits for."""
    return max(part_costs(costs, partition), default=0.0)


def balance_round_robin(costs: Sequence[float] | np.ndarray, parts: int) -> Partition:
    """Row ``i`` to slice ``i % parts``: ignores costs (the baseline)."""
    n = len(_check(costs, parts))
    return [list(range(p, n, parts)) for p in range(parts)]


def balance_greedy(costs: Sequence[float] | np.ndarray, parts: int) -> Partition:
    """Longest processing time first, equal cardinality; ties broken by index."""
    values = _check(costs, parts)
    size = len(values) // parts
    if size == 0:
        return [[] for _ in range(parts)]
    heap = [(0.0, p) for p in range(parts)]  # (load, part) of the parts not full yet
    out: Partition = [[] for _ in range(parts)]
    for i in sorted(range(len(values)), key=lambda i: (-values[i], i)):
        load, p = heapq.heappop(heap)
        out[p].append(i)
        if len(out[p]) < size:
            heapq.heappush(heap, (load + values[i], p))
    return [sorted(p) for p in out]


def _bldm(values: list[float], parts: int) -> Partition:
    """Balanced largest differencing; see the module docstring."""
    order = sorted(range(len(values)), key=lambda i: (values[i], i))
    # a partial partition: `parts` subsets as (sum, items), kept sorted by sum descending
    heap: list[tuple[float, int, list[tuple[float, list[int]]]]] = []
    tie = 0
    for start in range(0, len(order), parts):
        subsets = sorted(((values[i], [i]) for i in order[start : start + parts]), key=lambda s: -s[0])
        heap.append((-(subsets[0][0] - subsets[-1][0]), tie, subsets))
        tie += 1
    heapq.heapify(heap)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        # heaviest of one with the lightest of the other: the differencing step
        merged = [(sa + sb, ia + ib) for (sa, ia), (sb, ib) in zip(a, reversed(b))]
        merged.sort(key=lambda s: -s[0])
        heapq.heappush(heap, (-(merged[0][0] - merged[-1][0]), tie, merged))
        tie += 1
    if not heap:
        return [[] for _ in range(parts)]
    return [sorted(items) for _, items in heap[0][2]]


def balance_kk(costs: Sequence[float] | np.ndarray, parts: int) -> Partition:
    """Karmarkar–Karp (balanced largest differencing), or greedy's answer where that is better.

    Neither BLDM nor LPT dominates the other on every input, so this returns
    BLDM's partition unless :func:`balance_greedy`'s has a strictly smaller
    maximum part cost: its max cost is ``<=`` greedy's on every input.

    BLDM alone is optimal when ``len(costs) <= 2 * parts`` (one merge of the
    largest ``parts`` rows with the smallest, largest paired with smallest,
    which minimises the largest pair sum). Beyond that it is a heuristic and
    can miss the optimum: costs ``[7, 1, 9, 6, 5, 9]`` in 2 parts give 20
    where ``{1, 9, 9} | {5, 6, 7}`` reaches 19. Neither it nor greedy is
    guaranteed to beat round robin on every input (``[6, 8, 9, 4, 1, 5]``:
    greedy 18, round robin 17); they win on average by a wide margin
    (``benchmarks/balance.py``).
    """
    values = _check(costs, parts)
    kk = _bldm(values, parts)
    greedy = balance_greedy(values, parts)
    return greedy if max_cost(values, greedy) < max_cost(values, kk) else kk


@dataclass(frozen=True)
class BalanceMethod:
    """A registered balancing method: ``split(costs, parts)`` -> ``parts`` equal-count lists of row indices.

    ``phases=False``: ``split`` gets the rows' total costs, float64 ``[n]``.
    ``phases=True``: it gets their per-phase costs, float64 ``[n, 2]`` (encoder,
    backbone: ``transforms.VLMCost.parts``), and needs a cost that has phases.
    Calling the method calls ``split``.
    """

    split: Callable[[np.ndarray, int], Partition]
    phases: bool = False

    def __call__(self, costs: Sequence[float] | np.ndarray, parts: int) -> Partition:
        return self.split(np.asarray(costs, dtype=np.float64), parts)


def _as_method(entry: object) -> BalanceMethod:
    """A :class:`BalanceMethod` as is; a plain function ``(costs, parts) -> partition`` as one of total costs."""
    if isinstance(entry, BalanceMethod):
        return entry
    if callable(entry):
        return BalanceMethod(entry)
    raise RegistryError(f"a balance method is a function (costs, parts) -> partition or a BalanceMethod, "
                        f"got {type(entry).__name__}")


#: balancing methods by name (``GlobalBatches(balance=...)``, ``Balancer``, ``tgb produce --balance``)
BALANCERS: Registry[BalanceMethod] = Registry("balance method", group="torch_tgb.balancers", coerce=_as_method)
BALANCERS.register("greedy", balance_greedy)
BALANCERS.register("kk", balance_kk)
BALANCERS.register("round_robin", balance_round_robin)


def balance(costs: Sequence[float] | np.ndarray, parts: int, method: str) -> Partition:
    """The partition of a registered method (``"greedy"``, ``"kk"``, ``"round_robin"``, a plugin's) by name."""
    entry = BALANCERS[method]
    if entry.phases:
        raise ValueError(f"balance method {method!r} balances per-phase costs, not totals: use "
                         f"transforms.Balancer(method={method!r}, ...).plan(costs, phases=...)")
    return entry(costs, parts)
