"""TGBDataset against what was produced: every mesh position, slice exactness, coverage."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tests._key_layouts import new_namespaces
from tests.consumer._support import GLOBAL_BATCH, LAYOUT, SEQ_LEN, make_batch, produce
from torch_tgb.consumer import Cursor, TGBDataset, cursor_of
from torch_tgb.errors import DataTimeout, LayoutError
from torch_tgb.layout import Mesh
from torch_tgb.manifest import Manifest
from torch_tgb.storage import LocalStore

N_STEPS = 6


@pytest.fixture(scope="module", params=["flat", "spread"])
def namespace(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> str:
    """A sealed namespace of flat manifest keys (created before spreading) or spread ones (the default)."""
    ns = str(tmp_path_factory.mktemp("ns"))
    with pytest.MonkeyPatch.context() as patch:
        layout = new_namespaces(patch, request.param)
        produce(ns, N_STEPS)
    assert Manifest(LocalStore(ns)).key_layout() == layout
    return ns


def _read(ns: str, mesh: Mesh, **kwargs) -> list[dict[str, torch.Tensor]]:
    return list(TGBDataset(ns, mesh=mesh, **kwargs))


@pytest.mark.parametrize("prefetch", [0, 3])
def test_every_mesh_position_reads_exactly_its_slice(namespace: str, prefetch: int) -> None:
    for dp in range(2):
        for cp in range(2):
            got = _read(namespace, Mesh(dp, 2, cp, 2), prefetch=prefetch)
            assert len(got) == N_STEPS
            for step, batch in enumerate(got):
                want = LAYOUT.cut(make_batch(step))[dp * 2 + cp].tensors
                assert batch.keys() == want.keys()
                for name in want:
                    assert torch.equal(batch[name], want[name]), (dp, cp, step, name)


def test_dp_slices_disjoint_and_complete_cp_complementary(namespace: str) -> None:
    out = {(dp, cp): _read(namespace, Mesh(dp, 2, cp, 2)) for dp in range(2) for cp in range(2)}
    for step in range(N_STEPS):
        full = make_batch(step)
        samples = [out[(dp, 0)][step]["sample_id"] for dp in range(2)]
        assert not set(samples[0].tolist()) & set(samples[1].tolist())
        assert torch.equal(torch.cat(samples), full["sample_id"])
        for dp in range(2):
            a, b = out[(dp, 0)][step], out[(dp, 1)][step]
            assert torch.equal(a["sample_id"], b["sample_id"])  # same samples on both cp ranks
            joined = torch.cat([a["input_ids"], b["input_ids"]], dim=1)
            rows = slice(dp * GLOBAL_BATCH // 2, (dp + 1) * GLOBAL_BATCH // 2)
            assert torch.equal(joined, full["input_ids"][rows])
            assert a["input_ids"].shape[1] == b["input_ids"].shape[1] == SEQ_LEN // 2


def test_state_dict_is_json_and_names_the_cursor(namespace: str) -> None:
    import json

    ds = TGBDataset(namespace, mesh=Mesh(0, 2, 1, 2), prefetch=2)
    it = iter(ds)
    next(it)
    next(it)
    state = json.loads(json.dumps(ds.state_dict()))
    assert cursor_of(state) == Cursor(2, cursor_of(state).version)
    assert state["tgb_cursor"]["step"] == 2
    ds2 = TGBDataset(namespace, mesh=Mesh(0, 2, 1, 2))
    ds2.load_state_dict(state)
    rest = list(ds2)
    assert [int(b["sample_id"][0]) // 1000 for b in rest] == list(range(2, N_STEPS))


def test_topology_remap_reads(namespace: str) -> None:
    # dp 2 -> 4: each step spans two TGBs; dp 2 -> 1 merge: both slices in one batch.
    wide = [_read(namespace, Mesh(r, 4, 0, 1)) for r in range(4)]
    assert all(len(w) == N_STEPS // 2 for w in wide)
    for step in range(N_STEPS // 2):
        tokens = torch.cat([w[step]["input_ids"] for w in wide])
        want = torch.cat([make_batch(2 * step)["input_ids"], make_batch(2 * step + 1)["input_ids"]])
        assert torch.equal(tokens, want)
    narrow = _read(namespace, Mesh(0, 1, 0, 1))
    for step, batch in enumerate(narrow):
        for name, t in make_batch(step).items():
            assert torch.equal(batch[name], t)
    # cp 2 -> 4: each written cp chunk is split in two; the four chunks tile the sequence
    split = [_read(namespace, Mesh(1, 2, c, 4)) for c in range(4)]
    for step in range(N_STEPS):
        joined = torch.cat([split[c][step]["input_ids"] for c in range(4)], dim=1)
        assert torch.equal(joined, make_batch(step)["input_ids"][GLOBAL_BATCH // 2 :])
        assert all(torch.equal(split[c][step]["sample_id"], split[0][step]["sample_id"]) for c in range(4))
    spread = _read(namespace, Mesh(0, 1, 0, 1), dp_split="spread")
    assert len(spread) == 2 * N_STEPS
    assert torch.equal(torch.cat([b["sample_id"] for b in spread]), torch.cat([make_batch(s)["sample_id"] for s in range(N_STEPS)]))


def test_mid_tgb_cursor_rejected_by_a_whole_tgb_plan(namespace: str) -> None:
    ds = TGBDataset(namespace, mesh=Mesh(0, 1), dp_split="spread")
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    assert state["tgb_cursor"]["sub_step"] == 1
    merged = TGBDataset(namespace, mesh=Mesh(0, 1))
    merged.load_state_dict(state)
    with pytest.raises(LayoutError, match="sub_step"):
        next(iter(merged))
    # the spread reader itself continues exactly
    again = TGBDataset(namespace, mesh=Mesh(0, 1), dp_split="spread")
    again.load_state_dict(state)
    assert torch.equal(next(iter(again))["sample_id"], make_batch(0)["sample_id"][4:])


def test_timeout_names_namespace_and_version(tmp_path) -> None:
    ns = str(tmp_path)
    produce(ns, 2, seal=False)
    ds = TGBDataset(ns, mesh=Mesh(0, 2, 0, 2), timeout=0.3)
    got = []
    with pytest.raises(DataTimeout, match=r"step=2.*version") as info:
        for b in ds:
            got.append(b)
    assert len(got) == 2
    assert ns in str(info.value)
    assert ds.stats().poll_wait_s >= 0.3


def test_token_coverage_over_all_ranks(namespace: str) -> None:
    seen: Counter[int] = Counter()
    for dp in range(2):
        for cp in range(2):
            for b in _read(namespace, Mesh(dp, 2, cp, 2)):
                seen.update(b["input_ids"].flatten().tolist())
    want = Counter(t for s in range(N_STEPS) for t in make_batch(s)["input_ids"].flatten().tolist())
    assert seen == want


def test_iterating_again_continues_the_stream(namespace: str) -> None:
    ds = TGBDataset(namespace)  # mesh from the environment: a single process is dp 0 of 1
    assert ds.mesh == Mesh(0, 1)
    first = iter(ds)
    assert [int(next(first)["sample_id"][0]) for _ in range(2)] == [0, 1000]
    rest = list(ds)  # a new iterator while the first is still open
    assert [int(b["sample_id"][0]) for b in rest] == [s * 1000 for s in range(2, N_STEPS)]
    again = list(ds)  # begun at the seal of a sealed namespace: its next pass (tests/consumer/test_passes.py)
    assert [int(b["sample_id"][0]) for b in again] == [s * 1000 for s in range(N_STEPS)]
    ds.load_state_dict({"tgb_cursor": Cursor(0).to_json()})
    assert len(list(ds)) == N_STEPS
