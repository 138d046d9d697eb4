"""transforms.vlm_balance: plans cover every row once in equal micro-batches, balancing beats arrival order."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.transforms.balancer import imbalance
from torch_tgb.transforms.vlm_balance import (
    VLMCost,
    balance_vector,
    encoder_costs,
    micro_batch_plan,
    simulated_step_time,
)


@settings(max_examples=150, deadline=None)
@given(
    dp=st.integers(1, 4),
    m=st.integers(1, 4),
    per=st.integers(1, 4),
    method=st.sampled_from([None, "greedy", "kk", "round_robin", "vector"]),
    seed=st.integers(0, 2**16),
)
def test_plan_covers_every_row_once_in_equal_micro_batches(dp, m, per, method, seed):
    rng = np.random.default_rng(seed)
    n = dp * m * per
    encoder, backbone = rng.lognormal(0, 1.5, n) * (rng.random(n) < 0.7), rng.lognormal(0, 1, n)
    costs = encoder + backbone
    plan = micro_batch_plan(costs, dp, m, method, encoder=encoder, backbone=backbone)
    assert len(plan) == dp and all(len(rank) == m for rank in plan)
    assert all(len(micro) == per and micro == sorted(micro) for rank in plan for micro in rank)
    assert sorted(i for rank in plan for micro in rank for i in micro) == list(range(len(costs)))


def test_plan_without_method_keeps_arrival_blocks():
    assert micro_batch_plan(np.ones(8), 2, 2, None) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    with pytest.raises(ValueError):
        micro_batch_plan(np.ones(6), 2, 2, None)


def test_balanced_plans_beat_arrival_order_on_a_vlm_mix():
    rng = np.random.default_rng(0)
    dp, m, rows = 8, 4, 256
    backbone = rng.lognormal(12, 1.0, rows)
    encoder = rng.lognormal(11, 1.5, rows) * (rng.random(rows) < 0.7)
    total = encoder + backbone
    times = {}
    for method in (None, "greedy", "kk", "vector"):
        plan = micro_batch_plan(total, dp, m, method, encoder=encoder, backbone=backbone)
        micro = [float(total[mb].sum()) for rank in plan for mb in rank]
        times[method] = (imbalance(micro), simulated_step_time(encoder, backbone, plan))
    assert times["kk"][0] < times[None][0] and times["greedy"][0] < times[None][0]
    assert times["kk"][1] < times[None][1] and times["greedy"][1] < times[None][1]
    assert times["vector"][1] < times["kk"][1]  # both phases even beats an even sum on this mix
    perfect = m * (encoder.sum() + backbone.sum()) / (dp * m)
    assert all(t >= perfect * (1 - 1e-9) for _, t in times.values())


def test_vlm_cost_parts_of_a_packed_row():
    row = {
        "document_ids": torch.tensor([0, 0, 0, 1, 1, -1]),
        "image_grid_thw": torch.tensor([[1, 2, 3], [1, 1, 2]]),  # 6 and 2 patches
        "video_grid_thw": torch.zeros((0, 3), dtype=torch.int64),
    }
    cost = VLMCost(alpha=1.0, beta=2.0, encoder_weight=0.5)
    encoder, backbone = cost.parts(row)
    assert encoder == 6**2 + 2 * 6 + 2**2 + 2 * 2 and backbone == 3**2 + 3 + 2**2 + 2
    assert cost(row) == 0.5 * encoder + backbone
    assert VLMCost().parts({"document_ids": torch.tensor([-1])}) == (0.0, 0.0)
    assert list(encoder_costs([[3], []])) == [9.0, 0.0]
    with pytest.raises(ValueError):
        VLMCost(beta=-1)
    assert imbalance([]) == 1.0 and imbalance([1, 3]) == 1.5


def test_vector_balance_evens_both_costs():
    # two kinds of rows with the same total: encoder-heavy and text-heavy; a sum-balancer may pair them badly
    encoder = np.array([9.0, 9, 9, 9, 1, 1, 1, 1])
    backbone = np.array([1.0, 1, 1, 1, 9, 9, 9, 9])
    parts = balance_vector(encoder, backbone, 4)
    assert sorted(len(p) for p in parts) == [2, 2, 2, 2]
    assert all(encoder[p].sum() == 10 and backbone[p].sum() == 10 for p in parts)
    with pytest.raises(ValueError, match="encoder= and backbone="):
        micro_batch_plan(encoder + backbone, 2, 2, "vector")
