"""Issue 14 (9): ``ds.step`` / ``loader.step`` is the next TGB step to deliver, public."""

from __future__ import annotations

import warnings

import pytest
from _support import produce

import torch_tgb as tgb
from torch_tgb.cursor import Cursor, cursor_of

MESH = tgb.Mesh(0, 2, 0, 2)


@pytest.fixture(scope="module")
def ns(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("step") / "ns")
    produce(path, 8)
    return path


def test_dataset_step_counts_delivered_steps(ns):
    ds = tgb.TGBDataset(ns, mesh=MESH)
    assert ds.step == 0
    it = iter(ds)
    for expected in range(1, 4):
        next(it)
        assert ds.step == expected
    ds.load_state_dict({"tgb_cursor": Cursor(6).to_json()})
    assert ds.step == 6


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_step_matches_its_checkpoint_state(ns, workers):
    loader = tgb.DataLoader(ns, mesh=MESH, num_workers=workers)
    assert loader.step == 0
    it = iter(loader)
    for _ in range(5):
        next(it)
    assert loader.step == 5 == cursor_of(loader.state_dict()).step
    fresh = tgb.DataLoader(ns, mesh=MESH, num_workers=workers)
    fresh.load_state_dict(loader.state_dict())
    assert fresh.step == 5


def test_loader_construction_is_quiet(ns):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torchdata's 'set_vital' deprecation warning fails this
        tgb.DataLoader(ns, mesh=MESH)
