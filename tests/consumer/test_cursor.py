"""Cursor arithmetic and cursor_of over nested states."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torch_tgb.consumer import Cursor, cursor_of
from torch_tgb.cursor import reader_states
from torch_tgb.datapipes.read.project import cursor_at
from torch_tgb.errors import LayoutError


def test_cursor_of_finds_the_smallest_worker_cursor_by_path() -> None:
    state = {
        "_snapshot": {
            "_worker_snapshots": {
                "worker_0": {"dataset_state": {"tgb_cursor": Cursor(7, 3).to_json()}},
                "worker_1": {"dataset_state": {"tgb_cursor": Cursor(6, 3, 1, 2).to_json()}},
            }
        },
        "other": [{"tgb_cursor": Cursor(2, 4).to_json()}],  # not where a loader keeps its reader: not read
    }
    assert cursor_of(json.loads(json.dumps(state))) == Cursor(6, 3, 1, 2)
    with pytest.raises(ValueError, match="tgb_cursor"):
        cursor_of({"nothing": 1})


@pytest.mark.parametrize("workers", [0, 2])
def test_reader_states_finds_the_datasets_inside_real_loader_states(tmp_path, workers: int) -> None:
    """Pins torchdata's nesting of a StatefulDataLoader state (in-process and per worker) that reader_states reads."""
    import torch

    from torch_tgb import DataLoader, Layout, Mesh, Producer

    ns = str(tmp_path / "ns")
    with Producer(ns, producer_id="p", layout=Layout(dp=1)) as p:
        for offset in range(4):
            p.append({"x": torch.full((2, 3), offset)}, offset=offset)
        p.close(seal=True)
    loader = DataLoader(ns, mesh=Mesh(0, 1), num_workers=workers, prefetch=0)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    readers = reader_states(state)
    assert len(readers) == max(workers, 1)
    assert all("stats" not in r for r in readers)  # worker statistics stay out of the loader's state
    assert cursor_of(state) == Cursor(1, cursor_of(state).version)
    del it


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
