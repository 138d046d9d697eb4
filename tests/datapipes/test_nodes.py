"""Each pipeline stage alone: the shared resume contract, batching, errors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torchdata.nodes import IterableWrapper

from tests.consumer._support import LAYOUT, make_batch, produce
from torch_tgb.consumer import Cursor
from torch_tgb.datapipes.read.stats import pipeline_stats
from torch_tgb.datapipes import (
    BlockShuffle,
    FooterIndex,
    ManifestPoller,
    Pack,
    PollPolicy,
    Project,
    RangeReader,
    StepBatch,
)
from torch_tgb.errors import CorruptObject, DataTimeout, LayoutError, ManifestError
from torch_tgb.layout import Mesh, plan_reads
from torch_tgb.manifest import Manifest, ManifestState
from torch_tgb.storage import ForwardingStore, open_store
from torch_tgb.testing.resume import run_resume_test

N_STEPS = 9


@pytest.fixture(scope="module")
def namespace(tmp_path_factory: pytest.TempPathFactory) -> str:
    ns = str(tmp_path_factory.mktemp("ns"))
    produce(ns, N_STEPS)
    return ns


@pytest.fixture
def store(namespace: str) -> Any:
    s = open_store(namespace)
    yield s
    s.close()


def batch_equal(a: StepBatch, b: StepBatch) -> bool:
    return (
        a.task.cursor.to_json() == b.task.cursor.to_json()
        and a.task.keys == b.task.keys
        and a.tensors.keys() == b.tensors.keys()
        and all(torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors)
    )


def pipeline(store: Any, mesh: Mesh, *, prefetch: int = 0, worker: int = 0, workers: int = 1,
             split: str = "merge", origin: Cursor = Cursor(0),
             lookahead: int = 8, inline_local: bool = True) -> RangeReader:
    poller = ManifestPoller(Manifest(store), origin.step)
    project = Project(poller, plan_reads(LAYOUT, mesh, dp_split=split), origin=origin, worker=worker, num_workers=workers)
    footers = FooterIndex(project, store, lookahead=lookahead)
    return RangeReader(footers, store, prefetch=prefetch, inline_local=inline_local)


def test_poller_resume(store: Any) -> None:
    full = run_resume_test(lambda: ManifestPoller(Manifest(store), policy=PollPolicy(batch=4)), stop_after=5)
    assert [e.step for e in full] == list(range(N_STEPS))
    assert len({e.key for e in full}) == N_STEPS


@pytest.mark.parametrize(
    ("mesh", "split", "worker", "workers"),
    [
        (Mesh(1, 2, 1, 2), "merge", 0, 1),
        (Mesh(3, 4, 0, 1), "merge", 0, 1),  # two TGBs per step
        (Mesh(0, 1, 0, 2), "spread", 1, 2),  # two steps per TGB, odd steps only
    ],
)
def test_project_resume(store: Any, mesh: Mesh, split: str, worker: int, workers: int) -> None:
    plan = plan_reads(LAYOUT, mesh, dp_split=split)

    def make() -> Project:
        return Project(ManifestPoller(Manifest(store)), plan, worker=worker, num_workers=workers)

    full = run_resume_test(make, stop_after=2)
    steps = [t.cursor.position for t in full]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    if plan.tgbs_per_step == 2:
        assert [t.cursor.step for t in full] == [0, 2, 4, 6]  # TGB 8 alone cannot form a step
    if workers == 2:
        assert [t.index for t in full] == list(range(1, 2 * N_STEPS, 2))


@pytest.mark.parametrize(("prefetch", "inline_local"), [(0, True), (3, True), (3, False)])
def test_reader_resume_and_exact_data(store: Any, prefetch: int, inline_local: bool) -> None:
    mesh = Mesh(0, 2, 1, 2)
    full = run_resume_test(lambda: pipeline(store, mesh, prefetch=prefetch, inline_local=inline_local), stop_after=4,
                           equal=batch_equal, close=lambda n: n.close())
    for step, b in enumerate(full):
        want = LAYOUT.cut(make_batch(step))[1].tensors
        assert all(torch.equal(b.tensors[k], want[k]) for k in want)


class _Remote(ForwardingStore):
    """The namespace as a remote store sees it: no local path, so footers and slices go through requests."""

    def local_path(self, key: str) -> str | None:
        return None


def test_local_footers_are_parsed_one_task_at_a_time(store: Any) -> None:
    """Locally there is no round trip to save: a step never pays for the next steps' footers (flat p95)."""
    reader = pipeline(store, Mesh(0, 2, 0, 2), lookahead=4)
    footers = reader.source
    fetched: list[int] = []
    fetch_one = footers._fetch_one_local
    footers._fetch_one_local = lambda e: (fetched.append(e.entry.size), fetch_one(e))[1]
    batches: list[int] = []
    fetch = footers._fetch
    footers._fetch = lambda entries: (batches.append(len(entries)), fetch(entries))[1]
    assert len(list(reader)) == N_STEPS
    assert batches == [4] and len(fetched) == N_STEPS - 4  # the first task learns the store is local


def test_footers_are_fetched_in_batches_and_stay_warm(store: Any) -> None:
    store = _Remote(store)
    reader = pipeline(store, Mesh(0, 2, 0, 2), lookahead=4)
    footers = reader.source
    batches: list[int] = []
    fetch = footers._fetch
    footers._fetch = lambda tasks: (batches.append(len({e.key for t in tasks for e in t.entries
                                                        if footers.cached(e.key) is None})), fetch(tasks))[1]
    assert len(list(reader)) == N_STEPS
    first = pipeline_stats(reader)
    assert first.footer_requests == N_STEPS
    assert first.data_requests == N_STEPS
    assert sum(batches) == N_STEPS
    assert len(batches) <= -(-N_STEPS // 4) + 1 and max(batches) > 1  # several footers per fetch
    reader.reset(None)  # the footer cache survives a reset: second pass reads data only
    assert len(list(reader)) == N_STEPS
    second = pipeline_stats(reader)
    assert second.footer_requests == N_STEPS
    assert second.data_requests == 2 * N_STEPS
    assert second.footer_cache_hits >= N_STEPS


def test_footer_cache_is_bounded(store: Any) -> None:
    reader = pipeline(store, Mesh(0, 2, 0, 2), lookahead=1)
    footers = reader.source
    footers.cache_size = 2
    assert len(list(reader)) == N_STEPS
    assert len(footers._cache) <= 2


def test_corrupt_slice_names_object_and_step(tmp_path) -> None:
    ns = str(tmp_path)
    produce(ns, 3)
    s = open_store(ns)
    entry = Manifest(s).entry(1)
    path = s.local_path(entry.key)
    with open(path, "r+b") as f:  # flip one payload byte of slice (0, 0)
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    reader = pipeline(s, Mesh(0, 2, 0, 2), prefetch=2, inline_local=False)  # error crosses the prefetch threads
    assert next(reader).task.cursor.step == 0
    with pytest.raises(CorruptObject, match=r"step=1.*CRC32C") as info:
        next(reader)
    assert entry.key in str(info.value)
    reader.close()


def test_block_shuffle(store: Any) -> None:
    full = run_resume_test(lambda: BlockShuffle(Manifest(store), block_size=2, seed=3, epochs=2), stop_after=11)
    assert len(full) == 2 * N_STEPS
    assert [e.step for e in full] == list(range(2 * N_STEPS))  # positions count through the epochs
    for epoch in range(2):
        order = [e.tgb_step for e in full[epoch * N_STEPS : (epoch + 1) * N_STEPS]]
        assert sorted(order) == list(range(N_STEPS))
        starts = [s for s in order if s % 2 == 0]
        for s in starts:  # inside a block the order stays sequential
            if s + 1 < N_STEPS:
                assert order.index(s + 1) == order.index(s) + 1
    assert [e.tgb_step for e in full[:N_STEPS]] != [e.tgb_step for e in full[N_STEPS:]]


def test_block_shuffle_needs_a_sealed_namespace(tmp_path) -> None:
    produce(str(tmp_path), 2, seal=False)
    with pytest.raises(ManifestError, match="sealed"):
        next(BlockShuffle(Manifest(open_store(str(tmp_path)))))


@pytest.mark.parametrize("method", ["bfd", "concat", "none"])
def test_pack_resume_and_no_token_lost(method: str) -> None:
    """Token rows (the default): each row's tokens and its seq_lens hold every document's tokens once, resumably."""
    docs = [torch.arange(n, dtype=torch.int64) + 1000 * i for i, n in enumerate([5, 17, 3, 9, 12, 1, 30, 7, 7, 2])]
    full = run_resume_test(lambda: Pack(IterableWrapper(docs), 16, window=4, method=method), stop_after=3)
    tokens = torch.cat([r["input_ids"][: int(r["seq_lens"].sum())] for r in full])
    assert sorted(tokens.tolist()) == sorted(torch.cat(docs).tolist())
    assert all(r["input_ids"].shape == (17,) and r["input_ids"].dtype == torch.uint32 for r in full)
    assert all(r["seq_lens"].dtype == torch.int32 and int(r["seq_lens"].sum()) <= 16 for r in full)
    if method == "none":  # one sequence a row
        assert all(len(r["seq_lens"]) == 1 for r in full)


def test_pack_arrays_resume_and_no_token_lost() -> None:
    docs = [torch.arange(n, dtype=torch.int64) + 1000 * i for i, n in enumerate([5, 17, 3, 9, 12, 1, 30, 7, 7, 2])]
    full = run_resume_test(lambda: Pack(IterableWrapper(docs), 16, window=4, rows="arrays"), stop_after=3)
    tokens = torch.cat([r["input_ids"][r["document_ids"] >= 0] for r in full])
    assert sorted(tokens.tolist()) == sorted(torch.cat(docs).tolist())
    assert all(r["input_ids"].shape == (16,) for r in full)


def test_pack_refuses_ids_its_token_dtype_cannot_hold() -> None:
    from torch_tgb.errors import SchemaMismatch

    docs = [torch.tensor([1, 2, 70_000])]
    with pytest.raises(SchemaMismatch, match="a value 70000 does not fit uint16"):
        list(Pack(IterableWrapper(docs), 4, token_dtype=torch.uint16))
    assert list(Pack(IterableWrapper(docs), 4))[0]["input_ids"][2] == 70_000  # uint32 by default


def test_pack_concat_of_dict_documents_resumes_and_reports_stats() -> None:
    docs = [{"tokens": torch.arange(n, dtype=torch.int64) + 1000 * i, "id": i} for i, n in enumerate([5, 17, 3, 9, 40])]
    full = run_resume_test(lambda: Pack(IterableWrapper(docs), 16, window=3, method="concat", rows="arrays"),
                           stop_after=2)
    tokens = torch.cat([r["input_ids"][r["document_ids"] >= 0] for r in full])
    assert sorted(tokens.tolist()) == sorted(torch.cat([d["tokens"] for d in docs]).tolist())
    assert all(r["cu_seqlens"].shape == (17,) and r["cu_seqlens"].dtype == torch.int32 for r in full)
    node = Pack(IterableWrapper(docs), 16, window=3, method="concat", rows="arrays")
    rows = list(node)
    stats = node.stats()
    assert stats.rows == len(rows) and stats.documents == 5 and stats.tokens == 74
    assert stats.packing_efficiency == pytest.approx(74 / (16 * len(rows))) and stats.splits >= 2
    with pytest.raises(ValueError, match="unknown packing method"):
        Pack(IterableWrapper(docs), 16, method="ffd")
    with pytest.raises(ValueError, match="no 'tokens' field"):
        next(Pack(IterableWrapper([{"ids": torch.arange(3)}]), 16))


class FakeManifest:
    """head() reports ``steps`` committed, growing by one every ``grow_every`` polls."""

    def __init__(self, steps: int, *, grow_every: int | None = None, seal_at: int | None = None) -> None:
        self.steps, self.grow_every, self.seal_at, self.polls = steps, grow_every, seal_at, 0
        self.url = "memory://fake"

    def head(self) -> ManifestState:
        self.polls += 1
        if self.grow_every and self.polls % self.grow_every == 0:
            self.steps += 1
        sealed = self.seal_at is not None and self.steps >= self.seal_at
        return ManifestState(self.steps, self.steps, sealed, {})

    def entries(self, start: int, stop: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(key=f"data/p/{s}.tgb") for s in range(start, stop)]


def test_poller_waits_with_backoff_and_ends_at_seal() -> None:
    manifest = FakeManifest(1, grow_every=3, seal_at=4)
    poller = ManifestPoller(manifest, policy=PollPolicy(min_interval=0.001, max_interval=0.004))
    stats = poller.stats
    assert [e.step for e in poller] == [0, 1, 2, 3]
    assert poller.version == 4
    assert stats.snapshot().manifest_polls >= 9


def test_poller_timeout_message() -> None:
    poller = ManifestPoller(FakeManifest(2), timeout=0.05, policy=PollPolicy(min_interval=0.01))
    assert [next(poller).step, next(poller).step] == [0, 1]
    with pytest.raises(DataTimeout, match=r"memory://fake.*step=2.*last version seen 2"):
        next(poller)


def test_poller_interrupt_ends_a_wait() -> None:
    import threading

    poller = ManifestPoller(FakeManifest(0), policy=PollPolicy(min_interval=0.01, max_interval=0.01))
    threading.Timer(0.1, poller.interrupt).start()
    with pytest.raises(StopIteration):
        next(poller)


def test_project_rejects_inexpressible_origin(store: Any) -> None:
    plan = plan_reads(LAYOUT, Mesh(0, 4), dp_split="merge")
    with pytest.raises(LayoutError, match="sub_step"):
        Project(ManifestPoller(Manifest(store)), plan, origin=Cursor(2, 0, 1, 2))


def test_local_reads_do_not_write_through(store: Any) -> None:
    reader = pipeline(store, Mesh(0, 2, 0, 2))
    batch = next(reader)
    key = batch.task.keys[0]
    with open(store.local_path(key), "rb") as f:
        before = f.read()
    batch.tensors["input_ids"].add_(1)  # the mmap is copy-on-write: the object stays intact
    with open(store.local_path(key), "rb") as f:
        assert f.read() == before


def test_nodes_compose_under_torchdata_loader(store: Any) -> None:
    from torchdata.nodes import Loader

    mesh = Mesh(1, 2, 0, 2)
    loader = Loader(pipeline(store, mesh, prefetch=2))
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = loader.state_dict()
    again = Loader(pipeline(store, mesh, prefetch=2))
    again.load_state_dict(state)
    rest = list(again)
    steps = [b.task.cursor.step for b in head + rest]
    assert steps == list(range(N_STEPS))
