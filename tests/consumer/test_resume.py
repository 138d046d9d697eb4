"""Resume: read k steps, save, restore into a fresh reader (same or another topology), continue.

The concatenation must be exactly an uninterrupted run's data: every rank's
continuation equals what a reader of the new topology yields from the saved
cursor, and over all ranks and both phases every token is delivered once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from tests.consumer._support import LAYOUT, make_batch, produce
from torch_tgb.consumer import Cursor, DataLoader, TGBDataset, cursor_of
from torch_tgb.consumer._paths import RunPath
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.datapipes.read.project import cursor_at
from torch_tgb.layout import Layout, Mesh, plan_reads

N_STEPS = 7
K = 3  # steps read before the save


@pytest.fixture(scope="module")
def namespace(tmp_path_factory: pytest.TempPathFactory) -> str:
    ns = str(tmp_path_factory.mktemp("ns"))
    produce(ns, N_STEPS)
    return ns


def meshes(dp: int, cp: int) -> list[Mesh]:
    return [Mesh(d, dp, c, cp) for d in range(dp) for c in range(cp)]


def expected_stream(layout: Layout, mesh: Mesh, origin: Cursor, n: int, dp_split: str = "merge") -> list[dict]:
    """What a reader of ``mesh`` starting at ``origin`` yields, derived from the produced batches."""
    plan = plan_reads(layout, mesh, dp_split=dp_split)
    ratios = {"tgbs_per_step": plan.tgbs_per_step, "steps_per_tgb": plan.steps_per_tgb}
    out, i = [], 0
    while True:
        c = cursor_at(origin, i, **ratios)
        if c.step + plan.tgbs_per_step > n:
            return out
        reads = plan.reads(c.sub_step if plan.steps_per_tgb > 1 else 0)
        parts = [layout.cut(make_batch(c.step + p.tgb))[p.dp * layout.cp + p.cp].tensors for p in reads.pieces]
        out.append(reads.assemble(parts))
        i += 1


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


def make_reader(kind: str, ns: str, mesh: Mesh, workers: int, dp_split: str = "merge") -> Any:
    if kind == "dataset":
        return TGBDataset(ns, mesh=mesh, prefetch=2, dp_split=dp_split)
    if kind == "loader":
        return DataLoader(ns, mesh=mesh, num_workers=workers, prefetch=2, dp_split=dp_split)
    ds = TGBDataset(ns, mesh=mesh, prefetch=2, dp_split=dp_split)
    return StatefulDataLoader(ds, batch_size=None, num_workers=workers)


def take(it: Iterator[dict], k: int) -> list[dict]:
    return [next(it) for _ in range(k)]


SCENARIOS = {
    "same": ((2, 2), (2, 2), "merge"),
    "dp_x2": ((2, 2), (4, 2), "merge"),
    "dp_half": ((2, 2), (1, 2), "merge"),
    "dp_half_spread": ((2, 2), (1, 2), "spread"),
    "cp_2_to_1": ((2, 2), (2, 1), "merge"),
}


def run_scenario(ns: str, name: str, kind: str, workers: int) -> None:
    (dp_a, cp_a), (dp_b, cp_b), split = SCENARIOS[name]
    seen: Counter[int] = Counter()
    states = []
    for mesh in meshes(dp_a, cp_a):
        reader = make_reader(kind, ns, mesh, workers)
        it = iter(reader)
        first = take(it, K)
        assert same(first, expected_stream(LAYOUT, mesh, Cursor(0), N_STEPS)[:K])
        states.append(reader.state_dict())
        for b in first:
            seen.update(b["input_ids"].flatten().tolist())
        del it
    cursor = cursor_of(states[0])
    assert cursor.step == K and all(cursor_of(s).step == K for s in states)
    for i, mesh in enumerate(meshes(dp_b, cp_b)):
        reader = make_reader(kind, ns, mesh, workers, dp_split=split)
        reader.load_state_dict(states[i % len(states)])
        rest = list(reader)
        assert same(rest, expected_stream(LAYOUT, mesh, cursor, N_STEPS, split)), (name, mesh)
        # the restored reader's own state ends at the end of the stream
        assert cursor_of(reader.state_dict()).step == N_STEPS
        for b in rest:
            seen.update(b["input_ids"].flatten().tolist())
    # every token of the produced stream exactly once over both phases and all ranks (cp splits tokens)
    want = Counter(t for s in range(N_STEPS) for t in make_batch(s)["input_ids"].flatten().tolist())
    assert seen == want


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_resume_dataset(namespace: str, name: str) -> None:
    run_scenario(namespace, name, "dataset", 0)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", ["same", "dp_x2", "dp_half", "cp_2_to_1"])
def test_resume_loader(namespace: str, name: str, workers: int) -> None:
    run_scenario(namespace, name, "loader", workers)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_plain_stateful_dataloader(namespace: str, workers: int) -> None:
    run_scenario(namespace, "same", "stateful", workers)


def test_loader_state_moves_to_other_worker_count(namespace: str) -> None:
    mesh = Mesh(1, 2, 0, 2)
    loader = DataLoader(namespace, mesh=mesh, num_workers=2)
    it = iter(loader)
    first = take(it, K)
    state = loader.state_dict()
    del it
    for workers in (0, 3):
        other = DataLoader(namespace, mesh=mesh, num_workers=workers)
        other.load_state_dict(state)
        assert same(first + list(other), expected_stream(LAYOUT, mesh, Cursor(0), N_STEPS))


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_order_matches_no_workers(namespace: str, workers: int) -> None:
    mesh = Mesh(0, 2, 1, 2)
    got = list(DataLoader(namespace, mesh=mesh, num_workers=workers))
    assert same(got, expected_stream(LAYOUT, mesh, Cursor(0), N_STEPS))


def test_state_after_one_step_with_two_workers(namespace: str) -> None:
    # worker 1 has not delivered anything yet: its state must still say step 1, not 0
    loader = DataLoader(namespace, mesh=Mesh(0, 2, 0, 2), num_workers=2)
    it = iter(loader)
    next(it)
    assert cursor_of(loader.state_dict()).step == 1
    del it


def test_pin_memory_is_harmless_without_an_accelerator(namespace: str) -> None:
    mesh = Mesh(0, 2, 0, 2)
    got = list(DataLoader(namespace, mesh=mesh, pin_memory=True))
    assert same(got, expected_stream(LAYOUT, mesh, Cursor(0), N_STEPS))


def test_loader_stats_sum_workers(namespace: str) -> None:
    loader = DataLoader(namespace, mesh=Mesh(1, 2, 1, 2), num_workers=2)
    assert len(list(loader)) == N_STEPS
    stats = loader.stats()
    assert stats.steps == N_STEPS
    assert stats.data_requests == N_STEPS
    assert stats.read_amplification >= 1.0


@pytest.mark.parametrize("inline_local", [True, False])
def test_local_reads_report_their_fetch_latency(namespace: str, inline_local: bool) -> None:
    """Inline and prefetched local reads both feed ``fetch_p50_s``/``fetch_p95_s`` (the lean local path did not)."""
    ds = TGBDataset(namespace, mesh=Mesh(0, 2, 0, 2), options=ReaderOptions(inline_local=inline_local))
    paths = {id(ds.path): ds.path for _ in ds}
    assert len(paths) == 1
    stats = ds.stats()
    assert stats.data_requests == N_STEPS and stats.fetch_p95_s >= stats.fetch_p50_s > 0
    (path,) = paths.values()
    node = path.runs if isinstance(path, RunPath) else path.reader  # one-TGB objects: a run per step
    assert len(node.stats._latencies) == N_STEPS  # one sample per step, not only the first step's


def _loader_keys(state: dict) -> dict:
    """The StatefulDataLoader's own counters in a state (the dataset's part carries timings)."""
    return {k: v for k, v in state.items() if k not in ("dataset_state", "fetcher_state")}


def test_the_torchdata_internals_the_in_process_iterator_reads_are_there(namespace: str) -> None:
    """On the torchdata CI installs (0.11), InProcessIter finds every private attribute it reads and takes its
    shortcut; a torchdata that lost one would still read exactly (the next test), only slower."""
    from torch_tgb.consumer._in_process import PRIVATE_ATTRIBUTES, InProcessIter

    loader = DataLoader(namespace, mesh=Mesh(0, 2, 0, 2), prefetch=0)
    next(iter(loader))
    inner = loader._iterator
    assert isinstance(inner, InProcessIter)
    missing = [name for name in PRIVATE_ATTRIBUTES if not hasattr(inner, name)]
    assert not missing and inner._lean, f"torchdata's single-process iterator lost {missing}"


def test_a_torchdata_without_those_internals_reads_the_same_on_its_own_path(namespace: str, monkeypatch) -> None:
    """An internal gone (a newer torchdata): every item takes torchdata's own ``__next__``, same items, same state."""
    from torchdata.stateful_dataloader import stateful_dataloader

    import torch_tgb.consumer._in_process as loader_module

    mesh = Mesh(1, 2, 0, 2)

    def walk() -> list[tuple[dict, dict]]:
        loader = DataLoader(namespace, mesh=mesh)
        it = iter(loader)
        out = [(next(it), loader.state_dict()) for _ in range(N_STEPS)]
        with pytest.raises(StopIteration):
            next(it)
        return out

    lean = walk()
    monkeypatch.setattr(loader_module, "PRIVATE_ATTRIBUTES", (*loader_module.PRIVATE_ATTRIBUTES, "_gone_in_torchdata_x"))
    calls = []
    base_next = stateful_dataloader._StatefulSingleProcessDataLoaderIter.__next__
    monkeypatch.setattr(stateful_dataloader._StatefulSingleProcessDataLoaderIter, "__next__",
                        lambda self: calls.append(1) or base_next(self))
    fallback = walk()
    assert len(calls) == N_STEPS + 1  # every item, and the end, through torchdata's own path
    for (a, sa), (b, sb) in zip(lean, fallback, strict=True):
        assert same([a], [b])
        assert _loader_keys(sa) == _loader_keys(sb) and cursor_of(sa) == cursor_of(sb)


def test_in_process_iterator_keeps_the_stateful_dataloader_state(namespace: str) -> None:
    """The shortened in-process ``__next__`` yields what the base one yields, with the same state at every step."""
    mesh = Mesh(1, 2, 0, 2)

    def walk(loader: DataLoader) -> list[tuple[dict, dict]]:
        it, out = iter(loader), []
        for _ in range(N_STEPS):
            batch = next(it)
            out.append((batch, loader.state_dict()))
        with pytest.raises(StopIteration):
            next(it)
        assert loader.state_dict()["_iterator_finished"]
        return out

    lean = walk(DataLoader(namespace, mesh=mesh))
    with torch.profiler.profile() as prof:  # a recording profiler sends every step through the base __next__
        base = walk(DataLoader(namespace, mesh=mesh))
    for (a, sa), (b, sb) in zip(lean, base, strict=True):
        assert same([a], [b])
        assert _loader_keys(sa) == _loader_keys(sb) and cursor_of(sa) == cursor_of(sb)
    # the profiler still sees the loader's span on the path that keeps it
    assert any(e.name.startswith("enumerate(DataLoader)#") for e in prof.events())


def test_in_process_state_resumes_a_plain_stateful_dataloader(namespace: str) -> None:
    """A state of tgb.DataLoader(num_workers=0) restores a plain StatefulDataLoader over a TGBDataset, and back."""
    mesh = Mesh(0, 2, 1, 2)
    want = expected_stream(LAYOUT, mesh, Cursor(0), N_STEPS)
    loader = DataLoader(namespace, mesh=mesh)
    it = iter(loader)
    first = take(it, K)
    plain = StatefulDataLoader(TGBDataset(namespace, mesh=mesh), batch_size=None)
    plain.load_state_dict(loader.state_dict())
    plain_it = iter(plain)
    middle = take(plain_it, 2)
    again = DataLoader(namespace, mesh=mesh)
    again.load_state_dict(plain.state_dict())
    assert same(first + middle + list(again), want)


def test_steps_that_are_not_all_tensors_are_still_converted() -> None:
    from torch_tgb.consumer.loader import _collate

    step = {"input_ids": torch.arange(4)}
    assert _collate(step) is step
    converted = _collate({"input_ids": np.arange(4), "n": 3})
    assert isinstance(converted["input_ids"], torch.Tensor) and converted["n"] == 3


@pytest.mark.parametrize("pin", [False, True])
def test_with_workers_a_step_crosses_as_one_shared_buffer(namespace: str, pin: bool) -> None:
    """Each delivered step's tensors are views of one storage (one handover per step), with the same values."""
    mesh = Mesh(0, 2, 1, 2)
    got = list(DataLoader(namespace, mesh=mesh, num_workers=2, pin_memory=pin))
    assert same(got, expected_stream(LAYOUT, mesh, Cursor(0), N_STEPS))
    for batch in got:
        assert len(batch) > 1 and len({t.untyped_storage().data_ptr() for t in batch.values()}) == 1
