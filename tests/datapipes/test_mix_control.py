"""Mix(control=): control records replace the weights at exactly their step, in every run and after every restore."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torchdata.nodes import IterableWrapper

from torch_tgb.datapipes import Mix
from torch_tgb.errors import MixtureError
from torch_tgb.manifest import ControlChannel
from torch_tgb.storage import MemoryStore
from torch_tgb.testing.resume import run_resume_test


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore(f"mixctl-{uuid.uuid4().hex}")
    yield s
    s.destroy()


def sources(n: int = 400) -> dict[str, IterableWrapper]:
    return {name: IterableWrapper([(name, i) for i in range(n)]) for name in ("a", "b", "c")}


def test_a_record_replaces_the_weights_at_its_step(store) -> None:
    channel = ControlChannel(store, block=4)
    channel.set_mix({"b": 1.0}, step=7)
    channel.set_mix({"c": 1.0}, step=13)
    mix = Mix(sources(), {"a": 1.0}, control=ControlChannel(store), documents_per_step=2)
    got = [next(mix)[0] for _ in range(40)]
    assert got == ["a"] * 14 + ["b"] * 12 + ["c"] * 14  # 2 documents a step: step 7 is draw 14, step 13 draw 26
    assert mix.control_version == 2 and mix.stats().control_version == 2
    assert mix.stats().target == {"a": 0.0, "b": 0.0, "c": 1.0}
    # the producer claimed every block it entered: the trainer can no longer write into them
    assert channel.set_mix({"a": 1.0}, step=0).step == 20


def test_steering_resumes_exactly(store) -> None:
    channel = ControlChannel(store, block=3)
    for step, weights in ((4, {"b": 1.0, "c": 1.0}), (9, {"a": 2.0, "c": 1.0}), (22, {"a": 1.0})):
        channel.set_mix(weights, step=step)

    def make() -> Mix:
        return Mix(sources(), {"a": 1.0, "b": 1.0}, seed=5, control=ControlChannel(store), documents_per_step=3)

    for stop_after in (0, 11, 12, 13, 40, 70):
        run_resume_test(make, stop_after=stop_after, max_items=1200)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["a", "b", "c"])), max_size=5), st.integers(1, 8),
       st.integers(0, 100))
def test_a_restored_mix_meets_the_same_records_at_the_same_steps(records, block, stop) -> None:
    store = MemoryStore(f"mixctl-{uuid.uuid4().hex}")
    try:
        channel = ControlChannel(store, block=block)
        assert channel.block == block  # fixed now, whether or not a record is written
        for step, name in records:
            channel.set_mix({name: 1.0}, step=step)
        full = Mix(sources(), {"a": 1.0, "b": 1.0}, seed=1, control=ControlChannel(store))
        straight = [next(full) for _ in range(120)]
        first = Mix(sources(), {"a": 1.0, "b": 1.0}, seed=1, control=ControlChannel(store))
        head = [next(first) for _ in range(stop)]
        second = Mix(sources(), {"a": 1.0, "b": 1.0}, seed=1, control=ControlChannel(store))
        second.reset(first.state_dict())
        assert head + [next(second) for _ in range(120 - stop)] == straight
        assert second.control_version == full.control_version
        # every record is in force from its own step: the draw at step s comes from the newest record <= s
        by_step = sorted((r.step, next(iter(r.weights))) for _, r in channel.mix_records())
        for s, (name, _) in enumerate(straight):
            in_force = [n for at, n in by_step if at <= s]
            if in_force:
                assert name == in_force[-1], (s, by_step)
    finally:
        store.destroy()


def test_a_record_naming_an_unknown_source_stops_the_mix_by_name(store) -> None:
    ControlChannel(store).set_mix({"web": 1.0}, step=2)
    mix = Mix(sources(), {"a": 1.0}, control=ControlChannel(store))
    next(mix), next(mix)
    with pytest.raises(MixtureError, match="control record version 1.*unknown sources"):
        next(mix)


def test_control_must_be_a_channel() -> None:
    with pytest.raises(MixtureError, match="ControlChannel"):
        Mix(sources(), {"a": 1.0}, control="memory://x")  # type: ignore[arg-type]
