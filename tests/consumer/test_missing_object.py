"""Issue 25 edges: a reader fails where the data is missing, not before it, and at once on a mistyped path.

- a committed object deleted behind the namespace's back: every step before
  it is delivered, then ``ObjectNotFound`` names it (the footer lookahead
  window used to fail at its start: deleting step 40's object of 60 delivered
  32 steps, step 5's delivered 0);
- a local namespace whose parent directory does not exist is a typo:
  ``NamespaceNotFound`` at once (an existing empty directory still waits).
"""

from __future__ import annotations

import uuid

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.consumer import ReaderOptions
from torch_tgb.datapipes.read.batch_fetch import ErrorBudget
from torch_tgb.errors import DataTimeout, NamespaceNotFound, ObjectNotFound
from torch_tgb.manifest import Manifest
from torch_tgb.storage import MemoryStore

LAYOUT = tgb.Layout(dp=1)
STEPS = 60
QUICK = ReaderOptions(errors=ErrorBudget(backoff_s=0.0))


def _namespace() -> MemoryStore:
    """60 steps, one object per step, in memory (a remote store: footers are fetched in lookahead windows)."""
    store = MemoryStore(uuid.uuid4().hex)
    with tgb.Producer(store, producer_id="p0", layout=LAYOUT, commit_policy="fixed:8") as p:
        for k in range(STEPS):
            p.append({"x": torch.full((2, 4), k, dtype=torch.int32)}, offset=k)
        p.close(seal=True)
    return store


@pytest.mark.parametrize("missing", [5, 40, 59])
def test_every_step_before_a_missing_object_is_delivered(missing: int) -> None:
    store = _namespace()
    key = Manifest(store).entry(missing).key
    store.delete([key])
    got = []
    with pytest.raises(ObjectNotFound, match=key):
        for batch in tgb.TGBDataset(store, mesh=tgb.Mesh(0, 1), timeout=10, options=QUICK):
            got.append(int(batch["x"][0, 0]))
    assert got == list(range(missing))


def test_a_local_path_under_a_missing_directory_fails_at_once(tmp_path) -> None:
    typo = tmp_path / "no-such-dir" / "ns"
    with pytest.raises(NamespaceNotFound, match="no-such-dir.*does not exist"):
        next(iter(tgb.TGBDataset(str(typo), mesh=tgb.Mesh(0, 1), timeout=5)))  # before: waited, then timed out
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataTimeout, match="no TGB namespace there"):  # may still appear: waits
        next(iter(tgb.TGBDataset(str(empty), mesh=tgb.Mesh(0, 1), timeout=0.2)))
    with pytest.raises(DataTimeout):  # a namespace directory not created yet, in an existing parent: waits too
        next(iter(tgb.TGBDataset(str(tmp_path / "later"), mesh=tgb.Mesh(0, 1), timeout=0.2)))
