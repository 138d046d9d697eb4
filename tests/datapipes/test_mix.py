"""Mix: realised shares follow constant and scheduled weights; exhausted policies; exact resume."""

from __future__ import annotations

import json

import pytest
import torch
from torchdata.nodes import IterableWrapper

from torch_tgb.datapipes import Mix
from torch_tgb.errors import MixtureError
from torch_tgb.observability import stats_fields
from torch_tgb.testing.resume import run_resume_test
from torch_tgb.transforms import linear, piecewise


def sources(sizes: dict[str, int]) -> dict[str, IterableWrapper]:
    """Source ``name`` yields ``(name, i)`` for i < size."""
    return {name: IterableWrapper([(name, i) for i in range(n)]) for name, n in sizes.items()}


def test_constant_weights_over_10000_steps() -> None:
    weights = {"web": 0.6, "code": 0.3, "math": 0.1}
    mix = Mix(sources(dict.fromkeys(weights, 10_000)), weights, seed=3)
    names = [next(mix)[0] for _ in range(10_000)]
    assert mix.step == 10_000  # documents_per_step=1: the step is the document index
    for name, w in weights.items():
        assert abs(names.count(name) / 10_000 - w) < 0.02
    stats = mix.stats()
    assert stats.documents == 10_000 and stats.target == pytest.approx(weights)
    assert stats.share == {n: pytest.approx(names.count(n) / 10_000) for n in sorted(weights)}
    fields = stats_fields(stats)  # what observability exports: flat numeric fields per source
    assert {"share_web", "target_code", "step", "documents"} <= set(fields)


def test_linear_schedule_is_followed() -> None:
    steps, per_step = 10_000, 4
    schedule = linear({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}, steps)
    mix = Mix(sources({"a": steps * per_step, "b": steps * per_step}), schedule, documents_per_step=per_step)
    names = [next(mix)[0] for _ in range(steps * per_step)]
    window = 1000 * per_step  # 1000 steps
    for start in range(0, len(names), window):
        share_b = names[start : start + window].count("b") / window
        mid_step = (start + window / 2) / per_step
        assert abs(share_b - mid_step / steps) < 0.03, (start, share_b)


def test_tokens_per_step_advances_the_step_by_tokens() -> None:
    docs = {
        "a": IterableWrapper([torch.arange(5) for _ in range(20)]),
        "b": IterableWrapper([{"tokens": torch.arange(5)}] * 20),
    }
    schedule = piecewise([2], [{"a": 1}, {"b": 1}])
    mix = Mix(docs, schedule, tokens_per_step=10)
    got = [next(mix) for _ in range(8)]
    assert [isinstance(d, dict) for d in got] == [False] * 4 + [True] * 4  # steps 0-1 from a, then b
    assert mix.step == 4 and mix.stats().tokens == 40
    with pytest.raises(MixtureError, match="not both"):
        Mix(docs, {"a": 1}, tokens_per_step=10, documents_per_step=2)


def test_exhausted_policies() -> None:
    w = {"a": 0.5, "b": 0.5}
    stop = list(Mix(sources({"a": 3, "b": 50}), w, exhausted="stop"))
    assert sum(1 for n, _ in stop if n == "a") == 3 and len(stop) < 53
    renorm = list(Mix(sources({"a": 3, "b": 50}), w, exhausted="renormalize"))
    assert sorted(renorm) == sorted([("a", i) for i in range(3)] + [("b", i) for i in range(50)])
    cyc = Mix(sources({"a": 3, "b": 50}), w, exhausted="cycle")
    items = [next(cyc) for _ in range(60)]
    assert sum(1 for n, _ in items if n == "a") > 3 and cyc.get_state()["epochs"]["a"] >= 1
    with pytest.raises(MixtureError, match="yields nothing"):
        list(Mix(sources({"a": 0, "b": 5}), w, exhausted="cycle"))
    zero_rest = list(Mix(sources({"a": 3, "b": 50}), {"a": 1, "b": 0}, exhausted="renormalize"))
    assert zero_rest == [("a", 0), ("a", 1), ("a", 2)]  # no positive weight left: the stream ends


@pytest.mark.parametrize("policy", ["stop", "renormalize", "cycle"])
def test_resume_mid_schedule_equals_uninterrupted(policy: str) -> None:
    schedule = piecewise([10, 25], [{"a": 1, "b": 1}, {"a": 0.2, "b": 0.8, "c": 1}, {"c": 1, "a": 1}])

    def make() -> Mix:
        return Mix(sources({"a": 15, "b": 20, "c": 30}), schedule, seed=11, exhausted=policy, documents_per_step=2)

    limit = 120 if policy == "cycle" else 100_000
    if policy == "cycle":
        make_node = lambda: _Take(make(), limit)  # cycle is infinite
    else:
        make_node = make
    full = run_resume_test(make_node, stop_after=21)  # inside the second piece (steps 10-24)
    assert len(full) > 30
    for stop_after in (0, 1, 19, len(full) - 1, len(full)):
        run_resume_test(make_node, stop_after=stop_after)


class _Take(IterableWrapper):  # type: ignore[type-arg]
    """The first ``n`` items of an infinite node, resumable (state nests the node's)."""

    def __init__(self, node: Mix, n: int) -> None:
        super().__init__([])
        self.node, self.n, self.k = node, n, 0

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(None)
        self.node.reset(None if initial_state is None else initial_state["node"])
        self.k = 0 if initial_state is None else initial_state["k"]

    def next(self):  # type: ignore[no-untyped-def]
        if self.k >= self.n:
            raise StopIteration
        self.k += 1
        return next(self.node)

    def get_state(self) -> dict:
        return {"node": self.node.state_dict(), "k": self.k}


def test_state_nests_sources_by_name_and_is_json() -> None:
    mix = Mix(sources({"a": 5, "b": 5}), {"a": 1, "b": 1}, seed=1)
    for _ in range(4):
        next(mix)
    state = json.loads(json.dumps(mix.state_dict()))
    assert set(state["sources"]) == {"a", "b"} and state["draws"] == 4
    assert sum(s["_num_yielded"] for s in state["sources"].values()) == 4
    with pytest.raises(MixtureError, match="no state for sources"):
        Mix(sources({"a": 5, "c": 5}), {"a": 1}).reset(state)


def test_construction_errors() -> None:
    with pytest.raises(MixtureError, match="unknown sources"):
        Mix(sources({"a": 1}), {"a": 1, "z": 1})
    with pytest.raises(MixtureError, match="exhausted"):
        Mix(sources({"a": 1}), {"a": 1}, exhausted="wrap")
    with pytest.raises(MixtureError):
        Mix({}, {"a": 1})
    bad_later = Mix(sources({"a": 5}), lambda step: {"a": 1 if step < 2 else -1})
    next(bad_later), next(bad_later)
    with pytest.raises(MixtureError, match="step=2"):
        next(bad_later)


def test_prometheus_exports_a_share_series_per_source() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from torch_tgb.observability import TGBCollector

    mix = Mix(sources({"web": 10, "code": 10}), {"web": 3, "code": 1})
    next(mix)
    registry = prometheus_client.CollectorRegistry()
    TGBCollector([mix], registry=registry)
    text = prometheus_client.generate_latest(registry).decode()
    assert 'tgb_share_web{' in text and 'tgb_target_web{id=' in text and 'role="mix"' in text
    # issue 25: labelled by the sources' names (stable across restarts), not by an object address
    assert registry.get_sample_value("tgb_target_web", {"id": "code+web", "namespace": "", "role": "mix"}) == 0.75
    from torch_tgb.observability import as_source

    named = prometheus_client.CollectorRegistry()
    TGBCollector([as_source(Mix(sources({"web": 2}), {"web": 1}, name="corpus"), namespace="s3://b/run")],
                 registry=named)
    assert named.get_sample_value("tgb_target_web", {"id": "corpus", "namespace": "s3://b/run", "role": "mix"}) == 1.0
