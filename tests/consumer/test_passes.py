"""A sealed namespace is a finite dataset: ``len()`` is one pass for this rank, and each epoch's iteration a pass.

Frameworks iterate a loader once per epoch. Before, the second iteration of a
sealed stream was empty (Lightning's ``max_epochs=3`` trained one pass and an
empty epoch, silently); now an iteration that begins with no step of the pass
left reads the next pass, and its state protects every step (``tgb_cursor`` 0).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.consumer._support import LAYOUT, produce
from torch_tgb import DataLoader, Mesh, TGBDataset
from torch_tgb.checkpoint import Reclaimer, record_watermark
from torch_tgb.consumer import Cursor, cursor_of
from torch_tgb.consumer._passes import pass_length, steps_left

N = 5  # odd: a reader of two TGBs per step leaves one out at the end


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("sealed"))
    produce(path, N)
    return path


def step_of(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["sample_id"][0]) // 1000


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]), split=st.sampled_from(["merge", "spread"]),
       stop=st.sampled_from([None, 1, 3, 9]), epochs=st.sampled_from([1, 2]))
def test_len_is_what_one_pass_delivers(sealed, dp, cp, split, stop, epochs) -> None:
    """Under any mesh, dp_split and stop_step (the written layout is dp=2, cp=2): len() == steps of one pass."""
    if epochs != 1 and stop is not None:
        return  # stop_step bounds a stream read only
    ds = TGBDataset(sealed, mesh=Mesh(0, dp, 0, cp), dp_split=split, stop_step=stop, epochs=epochs, prefetch=0)
    assert len(ds) == len(list(ds)) // epochs
    assert len(DataLoader(sealed, mesh=Mesh(0, dp, 0, cp), dp_split=split, stop_step=stop, epochs=epochs)) == len(ds)


def test_an_unsealed_stream_has_no_length(tmp_path) -> None:
    ns = str(tmp_path / "open")
    produce(ns, 3, seal=False)
    with pytest.raises(TypeError, match="no len\\(\\) before its namespace is sealed"):
        len(DataLoader(ns, mesh=Mesh(0, 2)))
    produce(ns, 0, start=3)  # the same producer seals it
    assert len(DataLoader(ns, mesh=Mesh(0, 2))) == 3


@pytest.mark.parametrize("workers", [0, 2])
def test_each_iteration_is_a_pass_and_a_later_pass_resumes_exactly(sealed, workers) -> None:
    loader = DataLoader(sealed, mesh=Mesh(1, 2), num_workers=workers)
    assert [[step_of(b) for b in loader] for _ in range(3)] == [list(range(N))] * 3  # was: one pass, then []
    source = DataLoader(sealed, mesh=Mesh(1, 2), num_workers=workers)
    assert [step_of(b) for b in source] == list(range(N))
    second = iter(source)
    assert [step_of(next(second)) for _ in range(2)] == [0, 1]
    state = source.state_dict()
    assert cursor_of(state).step == 0  # a later pass may read any step again: the watermark protects them all
    resumed = DataLoader(sealed, mesh=Mesh(1, 2), num_workers=workers)
    resumed.load_state_dict(state)
    assert [step_of(b) for b in resumed] == list(range(2, N))  # the rest of the second pass
    assert [step_of(b) for b in resumed] == list(range(N))  # and the third


def test_no_further_pass_once_its_first_steps_are_reclaimed(tmp_path) -> None:
    ns = str(tmp_path / "ns")
    produce(ns, N)
    record_watermark(ns, "ck-3", {"tgb_cursor": Cursor(3).to_json()})
    Reclaimer(ns, grace_period=0).run_once()
    ds = TGBDataset(ns, mesh=Mesh(0, 2))
    ds.load_state_dict({"tgb_cursor": Cursor(3).to_json()})
    assert [step_of(b) for b in ds] == [3, 4]
    with pytest.warns(UserWarning, match="reclaimed, so no further pass can be read"):
        assert list(ds) == []


def test_a_stop_step_stream_stays_one_pass(sealed) -> None:
    ds = TGBDataset(sealed, mesh=Mesh(0, 2), stop_step=3)
    assert len(ds) == 3 and [step_of(b) for b in ds] == [0, 1, 2]
    with pytest.warns(UserWarning, match="ended at stop_step=3"):
        assert list(ds) == []


@given(num_steps=st.integers(0, 40), k=st.integers(1, 4), m=st.integers(1, 4), at=st.integers(0, 40))
def test_steps_left_counts_whole_steps(num_steps, k, m, at) -> None:
    if k > 1 and m > 1:
        return  # no plan is both
    at = min(at, num_steps)
    left = steps_left(Cursor(at), num_steps, tgbs_per_step=k, steps_per_tgb=m)
    assert left == ((num_steps - at) // k if k > 1 else (num_steps - at) * m)
    assert pass_length(num_steps, tgbs_per_step=k, steps_per_tgb=m) == steps_left(
        Cursor(0), num_steps, tgbs_per_step=k, steps_per_tgb=m)
