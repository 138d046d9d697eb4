"""Other loaders over a tgb.DataLoader's dataset, and positions restored late (what frameworks do off the path).

- A torch DataLoader that a framework builds over the TGB dataset with the
  loader's own ``collate_fn`` (accelerate's ``skip_first_batches``, which HF
  Trainer's resume uses) gets plain steps from its workers; it got the
  loader's shared-memory ``SharedStep`` objects, which it cannot unpack.
- Such a loader reading a dataset whose tgb.DataLoader has just been restored
  would skip the restored steps again: refused.
- accelerate's re-sharding wrappers over a TGBDataset (``accelerator.prepare``
  of a torch DataLoader over it) are refused; over one process they change nothing.
- ``iter()`` reads nothing: a state loaded before the first ``next()`` applies.
"""

from __future__ import annotations

import pytest
import torch

from tests.consumer._support import produce
from torch_tgb import DataLoader, Layout, Mesh, TGBDataset
from torch_tgb.consumer import Cursor
from torch_tgb.errors import FrameworkError

N = 8


@pytest.fixture(scope="module")
def ns(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("ns"))
    produce(path, N, layout=Layout(dp=2))
    return path


def step_of(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["sample_id"][0]) // 1000


def foreign(loader: DataLoader, workers: int) -> torch.utils.data.DataLoader:
    """What accelerate's skip_first_batches builds: a torch DataLoader over the dataset, with the loader's collate."""
    return torch.utils.data.DataLoader(loader.dataset, batch_size=None, num_workers=workers,
                                       collate_fn=loader.collate_fn)


@pytest.mark.parametrize("workers", [0, 2])
def test_another_loader_over_the_dataset_gets_plain_steps(ns, workers) -> None:
    loader = DataLoader(ns, mesh=Mesh(1, 2), num_workers=workers)
    got = list(foreign(loader, workers))
    assert all(type(b) is dict for b in got)  # was SharedStep with workers: "argument of type 'SharedStep' ..."
    assert [step_of(b) for b in got] == list(range(N)) and int(got[0]["sample_id"][0]) == 4  # rank 1's slice
    assert [step_of(b) for b in loader] == list(range(N))  # the loader itself still gets its steps


@pytest.mark.parametrize("workers", [0, 2])
def test_another_loader_right_after_a_restore_is_refused(ns, workers) -> None:
    loader = DataLoader(ns, mesh=Mesh(0, 2), num_workers=workers)
    loader.load_state_dict({"tgb_cursor": Cursor(3).to_json()})
    with pytest.raises(FrameworkError, match="continues at step 3.*skip_first_batches"):
        next(iter(foreign(loader, workers)))
    assert [step_of(b) for b in loader] == list(range(3, N))  # the loader itself continues there
    assert list(foreign(loader, workers))  # allowed again: the loader has read since the restore


def test_accelerate_resharding_a_tgb_dataset_is_refused(ns) -> None:
    shard = pytest.importorskip("accelerate.data_loader").IterableDatasetShard
    ds = TGBDataset(ns, mesh=Mesh(0, 2))
    wrapped = shard(ds, batch_size=1, num_processes=2, process_index=0)
    with pytest.raises(FrameworkError, match="IterableDatasetShard re-shards a TGBDataset over 2 processes"):
        wrapped.set_epoch(0)  # what accelerate's DataLoaderShard does before it reads
    with pytest.raises(FrameworkError, match="Pass a tgb.DataLoader to accelerator.prepare"):
        next(iter(wrapped))
    one = shard(TGBDataset(ns, mesh=Mesh(0, 2)), batch_size=1, num_processes=1)
    one.set_epoch(0)
    assert [step_of(b) for b in one] == list(range(N))  # one process: nothing is re-sharded


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_loaded_after_iter_before_the_first_batch_applies(ns, workers) -> None:
    loader = DataLoader(ns, mesh=Mesh(0, 2), num_workers=workers)
    it = iter(loader)  # what Lightning does before its callbacks restore a position
    loader.resume({"tgb_cursor": Cursor(5).to_json()})
    assert [step_of(b) for b in it] == [5, 6, 7]


def test_resume_after_a_batch_checks_where_the_iteration_began(ns) -> None:
    loader = DataLoader(ns, mesh=Mesh(0, 2))
    loader.load_state_dict({"tgb_cursor": Cursor(2).to_json()})
    it = iter(loader)
    assert step_of(next(it)) == 2  # fetched ahead, as Lightning does for a loader without length
    loader.resume({"tgb_cursor": Cursor(2).to_json()})  # the state it began at: nothing to do
    assert step_of(next(it)) == 3
    with pytest.raises(FrameworkError, match="restores this loader to step 6 after it has handed out batches"):
        loader.resume({"tgb_cursor": Cursor(6).to_json()})


def test_restart_reads_from_the_start_again(ns) -> None:
    loader = DataLoader(ns, mesh=Mesh(0, 2))
    it = iter(loader)
    next(it), next(it)
    loader.restart()  # a validation loader after each validation
    assert [step_of(b) for b in loader] == list(range(N))
