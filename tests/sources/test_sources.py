"""Every source: round trip, sharding, determinism, epochs and exact resume, over the same documents."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from tests.sources._corpus import KINDS, counts
from torch_tgb.testing.resume import items_equal, run_resume_test
from torch_tgb.transforms.partition import shard_assignment


def _drain(node):
    return list(node)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shard_count", [1, 2, 3])
def test_every_document_once_per_epoch_over_all_shards(corpus, docs, kind, shard_count):
    out = []
    for index in range(shard_count):
        node = corpus[kind](shard=(index, shard_count), seed=3, shuffle_buffer=3)
        got = _drain(node)
        assert all(d["tokens"].dim() == 1 and not d["tokens"].is_floating_point() for d in got)
        assert node.stats().records == len(got) and node.stats().skipped == 0
        assert node.stats().tokens == sum(int(d["tokens"].numel()) for d in got)
        out += got
    assert counts(out) == counts(docs)


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic_and_epochs_reorder(corpus, docs, kind):
    a = _drain(corpus[kind](seed=1, epoch=0))
    assert items_equal(a, _drain(corpus[kind](seed=1, epoch=0)))
    b = _drain(corpus[kind](seed=1, epoch=1))
    assert counts(b) == counts(a) == counts(docs)
    assert not items_equal(a, b)
    two = _drain(corpus[kind](seed=1, epoch=0, epochs=2))  # runs on into epoch 1
    assert items_equal(two, a + b)


@pytest.mark.parametrize("kind", KINDS)
def test_buffer_shuffle_reorders_inside_units_only(corpus, kind):
    plain = _drain(corpus[kind](seed=2))
    shuffled = _drain(corpus[kind](seed=2, shuffle_buffer=8))
    assert counts(plain) == counts(shuffled)
    if kind != "token_file":  # one document per unit: nothing to shuffle inside a unit
        assert not items_equal(plain, shuffled)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("options", [{}, {"shuffle_buffer": 4, "epochs": 2}])
def test_resume_equals_uninterrupted(corpus, kind, options):
    make = lambda: corpus[kind](shard=(1, 3), seed=5, **options)  # noqa: E731
    n = len(_drain(make()))
    for stop in sorted({0, 1, 2, n // 3, n // 2 + 1, n - 1, n}):
        run_resume_test(make, stop_after=stop)


@pytest.mark.parametrize("kind", ["webdataset", "parquet", "lance"])
def test_resume_reopens_only_the_current_unit(corpus, kind):
    """The restored state points inside a unit: a fresh node starts there, not at the first unit."""
    node = corpus[kind](seed=0)
    for _ in range(7):
        next(node)
    state = node.state_dict()
    assert state["unit"] >= 1 and state["record"] + state["emitted"] >= 1, state
    json.dumps(state)
    fresh = corpus[kind](seed=0)
    opened = []
    records = fresh._records
    fresh._records = lambda unit, start: (opened.append((unit, start)), records(unit, start))[1]  # type: ignore[method-assign]
    fresh.reset(state)
    rest = _drain(fresh)
    order = shard_assignment(fresh.num_units, shard_index=0, shard_count=1, seed=0, epoch=state["epoch"])
    assert opened[0] == (int(order[state["unit"]]), state["record"])
    assert [u for u, _ in opened] == [int(u) for u in order[state["unit"] :]]
    assert len(rest) + 7 == len(_drain(corpus[kind](seed=0)))


@pytest.mark.parametrize("kind", KINDS)
def test_pickled_mid_stream_continues_exactly(corpus, kind):
    node = corpus[kind](seed=4, shuffle_buffer=3)
    head = [next(node) for _ in range(5)]
    copy = pickle.loads(pickle.dumps(node))
    assert items_equal(head + _drain(copy), _drain(corpus[kind](seed=4, shuffle_buffer=3)))


def test_state_from_another_source_is_refused(corpus):
    from torch_tgb.errors import SourceError

    state = corpus["token_file"]().state_dict()
    with pytest.raises(SourceError, match="changed since"):
        corpus["token_file_grouped"]().reset(state)


def test_tokens_dtype(corpus):
    doc = next(corpus["token_file"]())  # uint16 on disk widens to int32
    assert doc["tokens"].dtype == torch.int32
    assert next(corpus["parquet"]())["tokens"].dtype == torch.int32
