"""State = what the training loop consumed, when a framework fetches ahead (Lightning's fit loop does, by one).

A fetcher that holds ``ahead`` batches calls ``track_consumed()`` before the
loop trains its first batch and ``consumed()`` after each; a checkpoint taken
after any trained batch must resume at the first batch not trained, exactly,
with and without workers, for a stream and for shuffled epochs. The mechanism
itself needs no framework; tests/integrations prove it inside the real ones.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.consumer._support import produce
from torch_tgb import DataLoader
from torch_tgb.consumer import cursor_of
from torch_tgb.layout import Layout, Mesh

N = 9


@pytest.fixture(scope="module")
def ns(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("ns"))
    produce(path, N, layout=Layout(dp=2), policy="fixed:3")
    return path


def step_of(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["sample_id"][0]) // 1000


def fetch_ahead(loader: DataLoader, ahead: int) -> Iterator[dict[str, torch.Tensor]]:
    """What a prefetching fit loop does: hold ``ahead`` batches, hand out the oldest, acknowledge it after training."""
    it = iter(loader)
    held = [next(it)]
    loader.track_consumed()  # Lightning's callback: on_train_start, after the first prefetch
    held += [b for _, b in zip(range(ahead - 1), it)]
    for batch in it:
        held.append(batch)
        yield held.pop(0)
        loader.consumed()
    while held:
        yield held.pop(0)
        loader.consumed()


def loader(ns: str, workers: int, **kw) -> DataLoader:
    return DataLoader(ns, mesh=Mesh(1, 2), num_workers=workers, **kw)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("ahead", [1, 2])
@pytest.mark.parametrize("save_after", [1, 4, N])
def test_state_after_a_trained_batch_resumes_at_the_next_one(ns, workers, ahead, save_after) -> None:
    first = loader(ns, workers)
    trained, state = [], None
    for batch in fetch_ahead(first, ahead):
        trained.append(step_of(batch))
        if len(trained) == save_after:  # the checkpoint, in on_train_batch_end: after the batch, before its ack
            first.consumed()
            state = first.state_dict()
            first.consumed(-0)  # nothing more (n=0 is allowed)
            break
    assert state is not None and cursor_of(state).step == save_after
    resumed = loader(ns, workers)
    resumed.load_state_dict(state)
    rest = [step_of(b) for b in resumed]
    if save_after < N:
        assert trained + rest == list(range(N))
    else:  # saved at the seal of a sealed namespace: the resumed loader reads its next pass
        assert trained == rest == list(range(N))


def test_without_tracking_the_state_is_what_was_handed_out(ns) -> None:
    plain = loader(ns, 0)
    it = iter(plain)
    for _ in range(3):
        next(it)
    plain.consumed()  # acknowledgements alone change nothing
    assert cursor_of(plain.state_dict()).step == 3


def test_shuffled_epochs_resume_where_the_loop_stopped(ns) -> None:
    kw = dict(shuffle=True, block_size=2, seed=3, epochs=2)
    reference = [step_of(b) for b in loader(ns, 0, **kw)]
    first = loader(ns, 0, **kw)
    trained = []
    gen = fetch_ahead(first, 1)
    for batch in gen:
        trained.append(step_of(batch))
        if len(trained) == N + 2:  # inside the second epoch
            first.consumed()
            state = first.state_dict()
            break
    resumed = loader(ns, 0, **kw)
    resumed.load_state_dict(state)
    assert trained + [step_of(b) for b in resumed] == reference


def test_tracking_begun_late_replays_rather_than_skips(ns) -> None:
    late = loader(ns, 0)
    it = iter(late)
    got = [step_of(next(it)) for _ in range(3)]  # three out before anyone asked for tracking
    late.track_consumed()
    late.consumed()
    with pytest.warns(UserWarning, match="replays batches rather than skipping"):
        state = late.state_dict()
    assert cursor_of(state).step == 0
    assert got == [0, 1, 2]


def test_more_acknowledgements_than_batches_warn(ns) -> None:
    over = loader(ns, 0)
    it = iter(over)
    over.track_consumed()
    next(it)
    with pytest.warns(UserWarning, match="only 1 were handed out"):
        over.consumed(2)
    assert cursor_of(over.state_dict()).step == 1
    with pytest.raises(ValueError, match="n >= 0"):
        over.consumed(-1)


def test_accelerate_keeps_the_loader_and_gets_a_rank_independent_state(ns) -> None:
    """The attributes accelerate reads (no accelerate needed here; tests/integrations run the real one)."""
    mine = loader(ns, 0)
    it = iter(mine)
    next(it)
    assert "dataset_state" in mine.state_dict()  # the full per-rank state until accelerate has seen the loader
    assert getattr(mine, "_is_accelerate_prepared", False) is True  # prepare_data_loader returns it unchanged
    mine._is_accelerate_prepared = True  # what Accelerator.prepare sets afterwards
    assert mine.use_stateful_dataloader is True  # save_state/load_state carry its state_dict
    theirs = DataLoader(ns, mesh=Mesh(0, 2))  # the other rank
    next(iter(theirs))
    assert theirs._is_accelerate_prepared
    state = mine.state_dict()
    assert state == theirs.state_dict() == {"tgb_cursor": state["tgb_cursor"], "tgb_source": state["tgb_source"]}
    assert state["tgb_source"]["versions"][0] <= state["tgb_source"]["versions"][1]  # what the run read


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iteration_per_epoch_continues_the_stream(ns, workers) -> None:
    """Lightning and HF Trainer iterate once per epoch: the next epoch continues the stream, never replays it.

    An epoch that begins at the seal of the sealed namespace reads its next pass (tests/consumer/test_passes.py).
    """
    epochs = loader(ns, workers)
    first = [step_of(b) for _, b in zip(range(4), epochs)]  # an epoch ended early (max_steps, a break)
    rest = [step_of(b) for b in epochs]
    assert first + rest == list(range(N))
    assert [step_of(b) for b in epochs] == list(range(N))  # begun at the seal: the next pass
    source = loader(ns, workers)
    for _, _batch in zip(range(5), source):
        pass
    resumed = loader(ns, workers)
    resumed.load_state_dict(source.state_dict())  # and after a load: the epoch after the first goes on from there
    assert [step_of(b) for _, b in zip(range(2), resumed)] == [5, 6]
    assert [step_of(b) for b in resumed] == list(range(7, N))
    assert [step_of(b) for b in resumed] == list(range(N))  # the next pass
