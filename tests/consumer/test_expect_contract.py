"""The data contract (``expect=``): refused before step 0 when the namespace's metadata differs; kept in the state."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.consumer._support import make_batch
from torch_tgb import DataLoader, Layout, Mesh, Producer, TGBDataset
from torch_tgb.consumer._contract import EXPECT_KEY, contract_differences
from torch_tgb.consumer._state import canonical_state
from torch_tgb.errors import SchemaMismatch

N = 4
METADATA = {"tokenizer": "sha256:ab12", "vocab_size": 50257, "seq_len": 16, "pipeline": ["pack", "bfd"]}


def write(path: str, metadata: dict) -> str:
    with Producer(path, producer_id="p0", layout=Layout(dp=2), metadata=metadata) as p:
        for step in range(N):
            p.append(make_batch(step), offset=step)
        p.close(seal=True)
    return path


@pytest.fixture(scope="module")
def ns(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write(str(tmp_path_factory.mktemp("ns")), METADATA)


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Another run's namespace: another tokenizer and vocabulary."""
    return write(str(tmp_path_factory.mktemp("other")), {**METADATA, "tokenizer": "sha256:ffff", "vocab_size": 32000})


def steps(batches) -> list[int]:
    return [int(b["sample_id"][0]) // 1000 for b in batches]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_met_contract_reads_and_rides_in_the_state(ns, workers) -> None:
    expect = {"tokenizer": "sha256:ab12", "vocab_size": 50257, "pipeline": ("pack", "bfd")}  # a tuple is a list
    loader = DataLoader(ns, mesh=Mesh(0, 2), num_workers=workers, expect=expect)
    it = iter(loader)
    assert steps([next(it), next(it)]) == [0, 1]
    state = loader.state_dict()
    assert canonical_state(state)[EXPECT_KEY] == {**expect, "pipeline": ["pack", "bfd"]}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_differing_contract_is_refused_before_step_0_naming_each_difference(ns, workers) -> None:
    loader = DataLoader(ns, mesh=Mesh(0, 2), num_workers=workers,
                        expect={"tokenizer": "sha256:ab12", "vocab_size": 32000, "data_mix": "v3"})
    with pytest.raises(SchemaMismatch) as raised:
        next(iter(loader))
    message = str(raised.value)
    assert ns in message and "2 of 3 expected keys differ" in message
    assert "'vocab_size': expected 32000, the namespace has 50257" in message
    assert "'data_mix': expected \"v3\", missing from the namespace's metadata" in message
    assert "tokenizer" not in message.split("differ")[1].split("its metadata")[0]  # the met key is not listed


def test_a_resume_carries_the_contract_to_another_namespace_and_is_refused(ns, other) -> None:
    source = TGBDataset(ns, mesh=Mesh(0, 2), expect={"tokenizer": "sha256:ab12", "vocab_size": 50257})
    it = iter(source)
    next(it)
    state = source.state_dict()
    resumed = DataLoader(other, mesh=Mesh(0, 2))  # no expect= of its own: the checkpoint's applies
    with pytest.raises(SchemaMismatch, match="'tokenizer': expected \"sha256:ab12\", the namespace has"):
        resumed.load_state_dict(state)
    same = DataLoader(ns, mesh=Mesh(0, 2))
    same.load_state_dict(state)
    assert steps(same) == [1, 2, 3]
    assert same.state_dict()["dataset_state"][EXPECT_KEY] == {"tokenizer": "sha256:ab12", "vocab_size": 50257}


def test_a_loader_contract_that_disagrees_with_the_checkpoint_is_refused(ns) -> None:
    source = DataLoader(ns, mesh=Mesh(0, 2), expect={"vocab_size": 50257})
    state = source.state_dict()
    with pytest.raises(SchemaMismatch, match="'vocab_size': 32000 here, 50257 in the loaded state"):
        DataLoader(ns, mesh=Mesh(0, 2), expect={"vocab_size": 32000}).load_state_dict(state)


def test_the_accelerate_and_dcp_state_carries_the_contract(ns) -> None:
    loader = DataLoader(ns, mesh=Mesh(1, 2), expect={"seq_len": 16})
    next(iter(loader))
    assert loader._is_accelerate_prepared  # from now on the rank-independent state
    assert loader.state_dict()[EXPECT_KEY] == {"seq_len": 16}


def test_an_expectation_json_cannot_hold_is_a_type_error(ns) -> None:
    with pytest.raises(TypeError, match="JSON"):
        TGBDataset(ns, expect={"tokenizer": object()})
    with pytest.raises(TypeError, match="mapping of metadata key names"):
        TGBDataset(ns, expect={1: "x"})  # type: ignore[dict-item]
    assert torch.is_tensor(next(iter(TGBDataset(ns, mesh=Mesh(0, 2), expect={})))["sample_id"])


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=6)


@given(metadata=st.dictionaries(st.text(max_size=5), JSON, max_size=5), data=st.data())
def test_differences_are_exactly_the_missing_and_changed_keys(metadata, data) -> None:
    kept = data.draw(st.lists(st.sampled_from(sorted(metadata)), unique=True) if metadata else st.just([]))
    changed = data.draw(st.lists(st.sampled_from(kept), unique=True) if kept else st.just([]))
    missing = data.draw(st.lists(st.text(max_size=5).filter(lambda k: k not in metadata), unique=True, max_size=2))
    expect = {k: metadata[k] for k in kept}
    for k in changed:
        expect[k] = [expect[k], "changed"]  # never equal to the value it wraps
    for k in missing:
        expect[k] = 1
    lines = contract_differences(expect, metadata)
    assert len(lines) == len(changed) + len(missing)
    assert all(any(line.startswith(repr(k)) for line in lines) for k in [*changed, *missing])
    assert contract_differences({k: metadata[k] for k in kept}, metadata) == []


def test_values_compare_as_json() -> None:
    assert contract_differences({"x": [1, 2]}, {"x": [1, 2]}) == []
    assert contract_differences({"x": True}, {"x": 1}) and contract_differences({"x": 1}, {"x": 1.0})
    assert contract_differences({"x": {"a": 1, "b": 2}}, {"x": {"b": 2, "a": 1}}) == []
