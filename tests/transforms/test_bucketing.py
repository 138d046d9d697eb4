"""transforms.bucketing: keys, edges (given, learned, between centres), the order of bucketed batches, resize."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import MediaError
from torch_tgb.transforms import Resolution, resolution_schedule
from torch_tgb.transforms.bucketing import (
    BucketResize,
    aspect_ratio,
    bucket_of,
    check_edges,
    duration,
    edges_between,
    frames,
    learn_edges,
    next_bucket,
    plan_bucket_batches,
    resolution,
)

values = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(values, st.integers(1, 12))
def test_learned_edges_cut_the_values_into_about_equal_buckets(xs, n):
    edges = learn_edges(xs, n)
    assert check_edges(edges) == edges and len(edges) <= n - 1
    ids = bucket_of(xs, edges)
    counts = Counter(ids.tolist())
    assert sorted(counts) == list(range(len(edges) + 1))  # every bucket holds some of the sample
    if len(set(xs)) == len(xs) and len(xs) >= n:  # distinct values: the quantile cut is exact, to one
        sizes = [counts[b] for b in range(n)]
        assert len(sizes) == n and max(sizes) - min(sizes) <= 1


@settings(max_examples=200, deadline=None)
@given(values, st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=8, unique=True))
def test_bucket_of_counts_the_edges_at_or_below(xs, raw):
    edges = sorted(raw)
    ids = bucket_of(xs, edges)
    for x, b in zip(xs, ids.tolist()):
        assert b == sum(e <= x for e in edges)
        assert (b == 0 or edges[b - 1] <= x) and (b == len(edges) or x < edges[b])


def test_edges_are_checked_and_placed_between_centres():
    with pytest.raises(ValueError):
        check_edges([1.0, 1.0])
    with pytest.raises(ValueError):
        bucket_of([float("nan")], [0.0])
    assert edges_between([0.5, 2.0]) == (1.0,)
    assert edges_between([1, 3], log=False) == (2.0,)
    aspects = [9 / 16, 3 / 4, 1.0, 4 / 3, 16 / 9]
    assert bucket_of(aspects, edges_between(aspects)).tolist() == [0, 1, 2, 3, 4]  # each centre in its own bucket


buckets_seq = st.lists(st.integers(0, 5), max_size=400)


@settings(max_examples=200, deadline=None)
@given(buckets_seq, st.integers(1, 9))
def test_plan_batches_every_sample_once_in_one_bucket_full_but_the_last(ids, size):
    plan = plan_bucket_batches(ids, size)
    flat = [i for _, batch in plan for i in batch]
    assert sorted(flat) == list(range(len(ids)))  # each sample exactly once
    assert all(ids[i] == b for b, batch in plan for i in batch)  # 100% of a batch's rows share its bucket
    per = Counter(b for b, _ in plan)
    for b, n in Counter(ids).items():
        assert per[b] == -(-n // size)  # a bucket's samples make ceil(n / size) batches: no more, no fewer
    partial = [b for b, batch in plan if len(batch) < size]
    assert len(partial) == len(set(partial))  # at most one short batch per bucket, after its full ones
    assert partial == sorted(partial) and plan[len(plan) - len(partial):] == [p for p in plan if len(p[1]) < size]


@settings(max_examples=200, deadline=None)
@given(buckets_seq, st.integers(1, 9))
def test_a_full_batch_comes_as_soon_as_its_bucket_fills(ids, size):
    # the full batches come in the order their last sample arrived: nothing waits for the end of the stream
    full = [batch for _, batch in plan_bucket_batches(ids, size) if len(batch) == size]
    assert [batch[-1] for batch in full] == sorted(batch[-1] for batch in full)
    for batch in full:
        assert batch == sorted(batch)


def test_next_bucket_prefers_the_one_that_filled_first_and_flushes_by_bucket_at_the_end():
    assert next_bucket({0: [0, 5], 1: [1, 2]}, 2, ended=False) == 1
    assert next_bucket({0: [0], 1: [1]}, 2, ended=False) is None
    assert next_bucket({0: [], 3: [9], 1: [4]}, 2, ended=True) == 1
    assert next_bucket({}, 2, ended=True) is None


def test_keys_read_images_grids_clips_and_audio():
    image = torch.zeros(30, 40, 3, dtype=torch.uint8)
    assert aspect_ratio({"images": [image]}) == pytest.approx(4 / 3)
    assert resolution({"images": [image]}) == 1200
    assert aspect_ratio({"image_grid_thw": torch.tensor([[1, 4, 8]])}) == 2.0
    assert aspect_ratio({"videos": [torch.zeros(5, 10, 20, 3)]}) == 2.0
    assert frames({"videos": [torch.zeros(5, 10, 20, 3)]}) == 5
    assert frames({"audio_feature_lengths": torch.tensor([101, 50])}) == 151
    assert duration({"audio_lengths": torch.tensor([8000, 16000]), "__sample_rate__": 16000}) == 1.5
    with pytest.raises(MediaError, match="no image"):
        aspect_ratio({"tokens": torch.zeros(3), "__key__": "k"})
    with pytest.raises(MediaError, match="no decoded audio"):
        duration({"tokens": torch.zeros(3)})


@pytest.mark.parametrize("aspect", [0.5, 0.75, 1.0, 1.5, 2.0])
def test_bucket_resize_gives_each_bucket_one_shape_under_the_step_resolution(aspect):
    aspects = (0.5, 0.75, 1.0, 1.5, 2.0)
    schedule = resolution_schedule([10], [Resolution(max_pixels=64 * 64), Resolution(max_pixels=128 * 128)])
    resize = BucketResize(aspects, schedule, factor=16)
    b = aspects.index(aspect)
    rng = np.random.default_rng(b)
    for step, budget in ((0, 64 * 64), (9, 64 * 64), (10, 128 * 128)):
        shapes = set()
        for h, w in ((50, 90), (120, 100), (31, 17)):
            image = torch.from_numpy(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
            row = resize({"images": [image], "tokens": torch.zeros(2)}, b, step)
            hh, ww = row["image_size"].tolist()
            assert row["pixels"].shape == (hh * ww, 3) and "images" not in row and "tokens" in row
            shapes.add((hh, ww))
        assert len(shapes) == 1  # every image of the bucket, whatever its own size: one shape
        hh, ww = shapes.pop()
        assert hh % 16 == 0 and ww % 16 == 0 and hh * ww <= budget and hh * ww >= budget / 2
        assert abs(np.log(ww / hh) - np.log(aspect)) <= np.log(1.5)


def test_bucket_resize_crops_the_centre():
    image = torch.zeros(32, 96, 3, dtype=torch.uint8)
    image[:, 32:64] = 200  # the centre third is bright
    row = BucketResize((1.0,), 32, factor=16, mode="bilinear")({"images": [image]}, 0, 0)
    assert row["image_size"].tolist() == [32, 32] and int(row["pixels"].min()) == 200
