"""BucketBatches: one bucket per batch, the data's bucket distribution over steps, exact resume anywhere."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torchdata.nodes import BaseNode

import torch_tgb as tgb
from torch_tgb import datapipes
from torch_tgb.errors import LayoutError, SourceError
from torch_tgb.testing.resume import items_equal, run_resume_test
from torch_tgb.transforms import BucketResize, Resolution, bucket_of, edges_between, resolution_schedule


class Listed(BaseNode[dict[str, Any]]):
    """Samples ``make(0), make(1), ...`` up to ``n``; state = the index (a source that resumes exactly)."""

    def __init__(self, n: int, make: Any) -> None:
        super().__init__()
        self.n, self.make, self._i = n, make, 0

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._i = int((initial_state or {}).get("i", 0))

    def get_state(self) -> dict[str, Any]:
        return {"i": self._i}

    def next(self) -> dict[str, Any]:
        if self._i >= self.n:
            raise StopIteration
        self._i += 1
        return self.make(self._i - 1)


def values_node(values: list[float]) -> Listed:
    """Samples ``{"value": [1], "x": [3], "ids": [i % 4], "__key__": i}`` of the given key values."""
    return Listed(len(values), lambda i: {"value": torch.tensor([values[i]]), "x": torch.full((3,), float(i)),
                                          "ids": torch.arange(i % 4), "__key__": i})


def value(sample: dict[str, Any]) -> float:
    return float(sample["value"])


def skewed(n: int, seed: int, probs=(0.4, 0.25, 0.2, 0.1, 0.05)) -> list[float]:
    rng = np.random.default_rng(seed)
    return (rng.choice(len(probs), size=n, p=probs) + rng.uniform(0.05, 0.95, n)).tolist()


EDGES = [1.0, 2.0, 3.0, 4.0]


def make(values: list[float], *, size: int = 4, dp: int = 2, buckets: Any = EDGES,
         **kw: Any) -> datapipes.BucketBatches:
    return datapipes.BucketBatches(values_node(values), key=value, buckets=buckets, global_batch_size=size,
                                   layout=tgb.Layout(dp=dp), ragged=("ids",), **kw)


def test_every_row_of_a_batch_is_from_its_bucket_and_every_sample_once():
    values = skewed(600, 0)
    batches = list(make(values, size=8))
    seen = []
    for batch in batches:
        b = int(batch["bucket_id"][0])
        assert (batch["bucket_id"] == b).all()
        real = batch["row_valid"]
        keys = batch["x"][real, 0].long().tolist()
        assert all(bucket_of(values[k], EDGES) == b for k in keys)  # 100% of the rows share the bucket
        assert batch["x"].shape == (8, 3) and len(batch["ids"]) == 8
        seen += keys
    assert sorted(seen) == list(range(600))


def test_bucket_distribution_over_the_run_follows_the_data():
    values = skewed(20_000, 1)
    node = make(values, size=16, dp=4)
    batches = list(node)
    data = Counter(bucket_of(values, EDGES).tolist())
    steps = [int(b["bucket_id"][0]) for b in batches]
    for part in (steps, steps[: len(steps) // 2], steps[len(steps) // 2 :]):  # the whole run, and each half
        share = Counter(part)
        for b in range(5):
            assert abs(share[b] / len(part) - data[b] / len(values)) <= 0.02, (b, share, data)
    stats = node.stats()
    assert stats.bucket_rows == [data[b] for b in range(5)] and stats.rows == 20_000
    assert stats.padding_rows == sum(-data[b] % 16 for b in range(5)) and stats.buffered == 0


def test_partial_buckets_are_flushed_padded_in_bucket_order_at_the_end():
    values = [0.5] * 5 + [3.5] * 3 + [1.5] * 8
    batches = list(make(values, size=4))
    assert [int(b["bucket_id"][0]) for b in batches] == [0, 1, 1, 0, 3]
    assert [int(b["row_valid"].sum()) for b in batches] == [4, 4, 4, 1, 3]
    last = batches[-1]
    assert torch.equal(last["x"][3], last["x"][0]) and torch.equal(last["ids"][3], last["ids"][0])  # a copy
    assert last["row_valid"].tolist() == [True, True, True, False]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(0, 60), st.sampled_from([2, 4, 6]), st.booleans())
def test_a_resume_at_any_step_reproduces_the_uninterrupted_batches(seed, stop, size, learn):
    values = skewed(160, seed, probs=(0.55, 0.3, 0.1, 0.04, 0.01))
    buckets = 4 if learn else EDGES

    def node() -> datapipes.BucketBatches:
        return make(values, size=size, buckets=buckets, learn_from=40)

    full = run_resume_test(node, stop_after=0, json_state=True)
    run_resume_test(node, stop_after=min(stop, len(full)), json_state=True)


def test_the_state_holds_positions_not_samples():
    values = skewed(3000, 2)
    node = make(values, size=32, dp=4)
    for _ in range(40):
        next(node)
        state = node.state_dict()
        buffered = sum(len(v) for v in state["buffered"].values())
        assert buffered <= 5 * 31 and len(json.dumps(state)) < 8 * 1024
        assert state["read"] >= buffered and state["source"]["i"] + state["read"] == node.source._i


def test_learned_edges_are_kept_in_the_state_and_checked():
    values = skewed(400, 3)
    node = make(values, buckets=5, learn_from=200)
    next(node)
    edges = node.stats().edges
    assert len(edges) == 4 and node.state_dict()["edges"] == edges
    keys = np.asarray(values[:200], dtype=np.float32)  # what the key reads: a float32 tensor's value
    counts = Counter(bucket_of(keys, edges).tolist())
    assert max(counts.values()) - min(counts.values()) <= 1  # quantiles of the first 200
    with pytest.raises(SourceError, match="buckets changed"):
        make(values, buckets=[0.5, 9.0]).reset(node.state_dict())


def test_bad_settings_and_rows_are_refused():
    with pytest.raises(LayoutError):
        make([1.0], size=3, dp=2)
    with pytest.raises(ValueError):
        datapipes.BucketBatches(values_node([1.0]), key="colour", buckets=EDGES, global_batch_size=2,
                                layout=tgb.Layout(dp=1))
    with pytest.raises(ValueError):
        make([1.0], buckets=[2.0, 1.0])
    node = datapipes.BucketBatches(values_node([0.5, 0.6]), key=value, buckets=EDGES, global_batch_size=2,
                                   layout=tgb.Layout(dp=1))  # "ids" differs by row but is not ragged
    with pytest.raises(LayoutError, match="'ids'.*ragged="):
        next(node)


# --- images: aspect-ratio buckets, a resolution schedule, TGBs ------------------------------------


def images_node(n: int, seed: int = 0) -> Listed:
    """Decoded images of random aspect ratios (as DecodeImages yields them)."""
    rng = np.random.default_rng(seed)
    sizes = [(int(rng.integers(20, 90)), int(rng.integers(20, 90))) for _ in range(n)]
    return Listed(n, lambda i: {"images": [torch.full((*sizes[i], 3), i % 251, dtype=torch.uint8)],
                                "tokens": torch.tensor([i]), "__key__": f"img{i}"})


ASPECTS = (0.5, 0.75, 1.0, 1.5, 2.0)


def image_batches(n: int = 90, *, size: int = 4) -> datapipes.BucketBatches:
    schedule = resolution_schedule([6], [Resolution(max_pixels=32 * 32), Resolution(max_pixels=64 * 64)])
    return datapipes.BucketBatches(images_node(n), key="aspect_ratio", buckets=edges_between(ASPECTS),
                                   global_batch_size=size, layout=tgb.Layout(dp=2), ragged=("pixels", "tokens"),
                                   prepare=BucketResize(ASPECTS, schedule, factor=16))


def test_a_resolution_schedule_moves_every_bucket_at_its_step_and_never_mixes_shapes():
    node = image_batches()
    for step, batch in enumerate(node):
        b = int(batch["bucket_id"][0])
        sizes = {tuple(s) for s, ok in zip(batch["image_size"].tolist(), batch["row_valid"].tolist()) if ok}
        assert len(sizes) == 1  # one shape per batch
        h, w = sizes.pop()
        budget = 32 * 32 if step < 6 else 64 * 64
        assert h * w <= budget and h % 16 == 0 and w % 16 == 0
        assert (h, w) == node.prepare.size(b, step)  # type: ignore[union-attr]
    run_resume_test(image_batches, stop_after=7)  # a resume across the boundary resizes as the run did


def test_bucketed_image_batches_through_tgbs(tmp_path):
    ns = str(tmp_path / "ns")
    layout = tgb.Layout(dp=2)
    tgb.produce(ns, image_batches(40), producer_id="p0", layout=layout, seal=True, progress=False)
    steps = [list(tgb.TGBDataset(ns, mesh=tgb.Mesh(r, 2))) for r in range(2)]
    assert len(steps[0]) == len(steps[1]) >= 10
    for a, b in zip(*steps):
        assert int(a["bucket_id"][0]) == int(b["bucket_id"][0])  # every rank: the same bucket at a step
        h, w = a["image_size"][0].tolist()
        assert a["pixels"].view(-1, h, w, 3).shape[0] == a["bucket_id"].shape[0]  # a rank's rows: one tensor
        assert (a["image_size"] == a["image_size"][0]).all()  # padding rows included
    assert not items_equal(steps[0][0]["pixels"], steps[1][0]["pixels"])
