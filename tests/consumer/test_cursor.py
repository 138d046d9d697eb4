"""Cursor arithmetic and cursor_of over nested states."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torch_tgb.consumer import Cursor, cursor_of
from torch_tgb.datapipes.project import cursor_at
from torch_tgb.errors import LayoutError


def test_cursor_of_finds_the_smallest_in_any_nesting() -> None:
    state = {
        "_snapshot": {
            "_worker_snapshots": {
                "worker_0": {"dataset_state": {"tgb_cursor": Cursor(7, 3).to_json()}},
                "worker_1": {"dataset_state": {"tgb_cursor": Cursor(6, 3, 1, 2).to_json()}},
            }
        },
        "other": [{"tgb_cursor": Cursor(9, 4).to_json()}],
    }
    assert cursor_of(json.loads(json.dumps(state))) == Cursor(6, 3, 1, 2)
    with pytest.raises(ValueError, match="tgb_cursor"):
        cursor_of({"nothing": 1})


def test_split_maps_positions_between_spread_factors() -> None:
    assert Cursor(5, 0, 2, 4).split(2) == 1  # half way through step 5
    assert Cursor(5, 0, 2, 4).split(4) == 2
    with pytest.raises(LayoutError, match="step=5"):
        Cursor(5, 0, 1, 4).split(2)  # a quarter cannot be expressed in halves


@given(
    step=st.integers(0, 1000),
    index=st.integers(0, 1000),
    k=st.sampled_from([1, 2, 4]),
    m=st.sampled_from([1, 2, 3]),
)
def test_cursor_at_is_monotonic_and_tiles_the_stream(step: int, index: int, k: int, m: int) -> None:
    if k > 1 and m > 1:
        return
    origin = Cursor(step)
    a = cursor_at(origin, index, tgbs_per_step=k, steps_per_tgb=m)
    b = cursor_at(origin, index + 1, tgbs_per_step=k, steps_per_tgb=m)
    assert b.position - a.position == (k if m == 1 else Fraction(1, m))
    assert cursor_at(origin, 0, tgbs_per_step=k, steps_per_tgb=m).position == step


def test_cursor_validates() -> None:
    with pytest.raises(ValueError):
        Cursor(-1)
    with pytest.raises(ValueError):
        Cursor(1, 0, 2, 2)
