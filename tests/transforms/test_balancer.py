"""transforms.Balancer: a pure plan of a global batch's rows over dp ranks x micro-batches.

Properties on any costs: every row is in exactly one micro-batch, every
micro-batch holds as many rows, and the plan balances no worse than the
algorithm ``GlobalBatches`` ran before the Balancer existed
(``_reference_plan``: ``transforms.vlm_balance.micro_batch_plan`` as it was,
kept here verbatim as the yardstick).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import LayoutError, RegistryError
from torch_tgb.transforms import (
    BALANCERS,
    Balancer,
    balance_greedy,
    balance_kk,
    balance_round_robin,
    balance_vector,
    part_costs,
    plan_imbalances,
)

BUILT_IN = (None, "round_robin", "greedy", "kk", "vector")
#: the balancers by name before the registry (``transforms.balance.BALANCERS`` was this dict)
_BEFORE = {"greedy": balance_greedy, "kk": balance_kk, "round_robin": balance_round_robin}


def balance(costs, parts, method):
    return _BEFORE[method](costs, parts)


def _reference_plan(costs, dp, micro_batches, method, encoder, backbone):
    """The plan before the Balancer: micro_batch_plan's body at the commit that introduced it, unchanged."""
    values = np.asarray(costs, dtype=np.float64).reshape(-1)
    n, bins = len(values), dp * micro_batches
    size = n // bins
    if method is None:
        return [[list(range((r * micro_batches + k) * size, (r * micro_batches + k + 1) * size))
                 for k in range(micro_batches)] for r in range(dp)]
    if method == "vector":
        parts = balance_vector(encoder, backbone, bins)
    else:
        parts = balance(values, bins, method)
    group_method = "kk" if method == "vector" else method
    groups = balance(part_costs(values, parts), dp, group_method) if micro_batches > 1 else [[r] for r in range(dp)]
    return [sorted((parts[b] for b in group), key=lambda rows: rows[0] if rows else -1) for group in groups]


@st.composite
def batches(draw):
    dp = draw(st.integers(1, 4))
    m = draw(st.integers(1, 3))
    rows = dp * m * draw(st.integers(1, 5))
    cost = st.floats(0, 1e4, allow_nan=False, allow_infinity=False)
    encoder = np.array(draw(st.lists(cost, min_size=rows, max_size=rows)))
    backbone = np.array(draw(st.lists(cost, min_size=rows, max_size=rows)))
    return dp, m, encoder, backbone, draw(st.sampled_from(BUILT_IN))


def _rows(plan) -> Iterator[int]:
    return (i for rank in plan for micro in rank for i in micro)


@settings(max_examples=300, deadline=None)
@given(batches())
def test_every_row_once_in_equal_micro_batches_and_no_worse_than_before(case) -> None:
    dp, m, encoder, backbone, method = case
    total = encoder + backbone
    phases = np.stack([encoder, backbone], axis=1)
    plan = Balancer(method, dp, m).plan(total, phases)
    assert len(plan) == dp and all(len(rank) == m for rank in plan)
    assert sorted(_rows(plan)) == list(range(len(total)))
    assert {len(micro) for rank in plan for micro in rank} == {len(total) // (dp * m)}
    assert all(micro == sorted(micro) for rank in plan for micro in rank)
    costs = np.stack([total, encoder, backbone], axis=1)
    ours = plan_imbalances(costs, plan)
    before = plan_imbalances(costs, _reference_plan(total, dp, m, method, encoder, backbone))
    tolerance = 1e-9 * max(1.0, float(total.sum()))
    assert max(ours["slice_costs"]) <= max(before["slice_costs"]) + tolerance
    assert ours["micro"] <= before["micro"] + 1e-9


def test_arrival_order_is_blocks() -> None:
    assert Balancer(None, 2, 2).plan(np.ones(8)) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]


def test_a_plan_that_does_not_divide_is_refused() -> None:
    with pytest.raises(LayoutError, match="6 rows cannot be cut into dp=2 x micro_batches=2"):
        Balancer("kk", 2, 2).plan(np.ones(6))


def test_the_balancer_refuses_unknown_methods_and_phases_it_lacks() -> None:
    with pytest.raises(RegistryError, match="unknown balance method 'nope'; choose from greedy, kk"):
        Balancer("nope", 2)
    with pytest.raises(ValueError, match="'vector' balances per-phase costs: pass phases="):
        Balancer("vector", 2).plan(np.ones(4))
    with pytest.raises(LayoutError, match="dp must be an int >= 1"):
        Balancer("kk", 0)


def test_a_method_that_returns_no_partition_is_refused() -> None:
    BALANCERS.register("test_drops_a_row", lambda costs, parts: [list(range(len(costs) - 1)), []])
    try:
        with pytest.raises(LayoutError, match="'test_drops_a_row' returned no partition of 4 rows into 2 parts"):
            Balancer("test_drops_a_row", 2).plan(np.ones(4))
    finally:
        BALANCERS.unregister("test_drops_a_row")


def test_a_registered_method_is_one_registration_away() -> None:
    """A function (costs, parts) -> partition, registered once: the Balancer plans with it."""
    BALANCERS.register("test_reverse", lambda costs, parts: [sorted(len(costs) - 1 - i for i in range(p, len(costs),
                                                                                                     parts))
                                                              for p in range(parts)])
    try:
        assert Balancer("test_reverse", 2).plan(np.arange(6.0)) == [[[1, 3, 5]], [[0, 2, 4]]]
    finally:
        BALANCERS.unregister("test_reverse")


def test_the_text_pipeline_does_not_import_the_vlm_balance() -> None:
    """GlobalBatches asks a Balancer for the plan; VLM pricing reaches it only as a PhasedCost value."""
    import ast
    from pathlib import Path

    import torch_tgb

    produce = Path(torch_tgb.__file__).parent / "datapipes" / "produce"
    for name in ("global_batches.py", "batches.py", "pack.py"):
        tree = ast.parse((produce / name).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any("vlm_balance" in m for m in imported if m), f"{name} imports {sorted(imported)}"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=4), min_size=1, max_size=6),
       st.floats(0, 8), st.integers(0, 3))
def test_token_rows_priced_at_once_as_row_by_row(lens, alpha, padding) -> None:
    import torch

    from torch_tgb.transforms import price_rows
    from torch_tgb.transforms.balancer import attention_cost

    rows = [{"seq_lens": torch.tensor(r, dtype=torch.int32)} for r in lens]
    table = price_rows(rows, "attention", alpha=alpha, size=len(rows) + padding)
    by_row = price_rows(rows, lambda row: attention_cost(row, alpha=alpha), size=len(rows) + padding)
    assert table.shape == (len(rows) + padding, 3) and not table[len(rows):].any()
    np.testing.assert_allclose(table, by_row, rtol=1e-12)
    np.testing.assert_allclose(table[:, 0], table[:, 2])
