"""Consumer benchmarks (pytest-benchmark): one rank's hot path and requests per step.

Run: ``python -m pytest benchmarks/test_bench_consumer.py -s --benchmark-enable``.
Without ``--benchmark-enable`` each benchmark body runs once, as a smoke test.
The full §7.4 sweep (amplification, throughput, tail latency) is
``python benchmarks/consumer_read.py``.
"""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest
import torch

from torch_tgb.consumer._shared_step import pack_step
from torch_tgb.consumer import TGBDataset
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.datapipes import FooterIndex, ManifestPoller, Project, RangeReader
from torch_tgb.datapipes.read.stats import pipeline_stats
from torch_tgb.layout import Layout, Mesh, plan_reads
from torch_tgb.manifest import Manifest
from torch_tgb.producer import Producer, ProducerConfig
from torch_tgb.storage import open_store

SHAPE = (32, 512)
STEPS = int(os.environ.get("TGB_BENCH_STEPS", "200"))


@pytest.fixture(scope="module")
def local_ns(tmp_path_factory: pytest.TempPathFactory) -> str:
    ns = str(tmp_path_factory.mktemp("hot"))
    rng = np.random.default_rng(0)
    with Producer(ns, producer_id="hot", layout=Layout(dp=1), commit_policy="fixed:64") as p:
        for offset in range(STEPS):
            p.append({"input_ids": torch.from_numpy(rng.integers(0, 50000, size=SHAPE, dtype=np.uint32))}, offset=offset)
        p.close(seal=True)
    return ns


def _segments(ns: str, layout: Layout) -> str:
    rng = np.random.default_rng(0)
    with Producer(ns, producer_id="hot", layout=layout, commit_policy="fixed:64", config=ProducerConfig.bulk()) as p:
        for offset in range(STEPS):
            p.append({"input_ids": torch.from_numpy(rng.integers(0, 50000, size=SHAPE, dtype=np.uint32))}, offset=offset)
        p.close(seal=True)
    return ns


@pytest.fixture(scope="module")
def segment_ns(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same batches in segment objects (what write_dataset and tgb produce write)."""
    return _segments(str(tmp_path_factory.mktemp("seg")), Layout(dp=1))


@pytest.fixture(scope="module")
def segment_ns_dp4(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same batches written for dp=4 (a job resumed on a quarter of its ranks reads them merged)."""
    return _segments(str(tmp_path_factory.mktemp("seg4")), Layout(dp=4))


@pytest.mark.parametrize("runs", [True, False], ids=["run_path", "step_path"])
@pytest.mark.parametrize("written", ["segment_ns", "segment_ns_dp4"], ids=["same_mesh", "merged_dp4"])
def test_segments_run_path_vs_step_path(benchmark, request: pytest.FixtureRequest, written: str, runs: bool) -> None:
    """The run path (datapipes.read.local_runs) against the step-by-step pipeline it replaces, int64 delivery.

    ``merged_dp4``: written for dp=4, read by one rank (``dp_split="merge"``): four slices joined per step.
    """
    ns = request.getfixturevalue(written)
    options = ReaderOptions(dtype=torch.int64, runs=runs)

    def run() -> int:
        return sum(1 for _ in TGBDataset(ns, mesh=Mesh(0, 1), options=options))

    assert benchmark.pedantic(run, rounds=3, iterations=1) == STEPS


def test_dataset_hot_path(benchmark, local_ns: str) -> None:
    def run() -> int:
        return sum(1 for _ in TGBDataset(local_ns, mesh=Mesh(0, 1), prefetch=4))

    assert benchmark.pedantic(run, rounds=3, iterations=1) == STEPS


def test_raw_mmap_floor(benchmark, tmp_path) -> None:
    path = tmp_path / "raw.bin"
    per = SHAPE[0] * SHAPE[1] * 4
    path.write_bytes(np.zeros((STEPS, *SHAPE), dtype=np.uint32).tobytes())
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # writable view: no torch warning

        def run() -> int:
            n = 0
            for i in range(STEPS):
                t = torch.from_numpy(np.frombuffer(mm, dtype=np.uint32, count=SHAPE[0] * SHAPE[1], offset=i * per).reshape(SHAPE))
                n += t.shape[0] > 0
            return n

        assert benchmark(run) == STEPS
        mm.close()


def test_requests_per_step_with_warm_footers(local_ns: str) -> None:
    store = open_store(local_ns)
    footers = FooterIndex(Project(ManifestPoller(Manifest(store)), plan_reads(Layout(dp=1), Mesh(0, 1))),
                          store, cache_size=STEPS)
    reader = RangeReader(footers, store, prefetch=2)
    assert sum(1 for _ in reader) == STEPS
    cold = pipeline_stats(reader)
    reader.reset(None)
    assert sum(1 for _ in reader) == STEPS
    warm = pipeline_stats(reader)
    reader.close()
    per_step = (warm.requests - cold.requests) / STEPS
    print(f"\nrequests per rank-step: cold {cold.requests / STEPS:.3f}, warm {per_step:.3f}")
    assert per_step <= 1.05


def _shared(step):  # noqa: ANN001, ANN202  (a module-level collate: workers pickle it)
    return pack_step(step)


def _as_is(step):  # noqa: ANN001, ANN202
    return step


@pytest.fixture(scope="module")
def three_tensor_ns(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Segments of steps with tokens, labels and document ids (what packed training data carries)."""
    ns = str(tmp_path_factory.mktemp("three"))
    rng = np.random.default_rng(0)
    with Producer(ns, producer_id="hot", layout=Layout(dp=1), commit_policy="fixed:64",
                  config=ProducerConfig.bulk()) as p:
        for offset in range(STEPS):
            tokens = torch.from_numpy(rng.integers(0, 50000, size=SHAPE, dtype=np.uint32))
            p.append({"input_ids": tokens, "labels": tokens.to(torch.int64),
                      "document_ids": torch.zeros(SHAPE, dtype=torch.int32)}, offset=offset)
        p.close(seal=True)
    return ns


@pytest.mark.parametrize("packed", [True, False], ids=["one_buffer", "per_tensor"])
def test_worker_handover_one_buffer_vs_per_tensor(benchmark, three_tensor_ns: str, packed: bool) -> None:
    """Two DataLoader workers, three tensors a step: handed over as one shared buffer (tgb.DataLoader) or one each."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def run() -> int:
        loader = StatefulDataLoader(TGBDataset(three_tensor_ns, mesh=Mesh(0, 1)),
                                    batch_size=None, num_workers=2, collate_fn=_shared if packed else _as_is)
        n = 0
        for step in loader:
            n += len(step.unpack() if packed else step) == 3
        return n

    assert benchmark.pedantic(run, rounds=3, iterations=1) == STEPS


def _version_of(entries: int) -> bytes:
    """The bytes of a version holding ``entries`` TGBs of one segment (what a bulk producer commits)."""
    from torch_tgb.manifest import ProducerState, TGBEntry, Version

    tgbs = tuple(TGBEntry(key="data/p0/e000001-o000000000000-0a1b2c3d.tgb", size=(i + 1) * 33688,
                          footer_offset=(i + 1) * 33688 - 408, footer_length=384, producer="p0", offset=i,
                          samples=32, tokens=16416, start=i * 33688, object_size=entries * 33688)
                 for i in range(entries))
    return Version(1, "0123456789abcdef", 0, tgbs, {"p0": ProducerState(1, entries)}, False, 0.0).encode()


def test_bench_version_decode_1024_entries(benchmark) -> None:
    """A reader decodes every version it replays: 1024 entries of one segment (a bulk producer's commit)."""
    from torch_tgb.manifest import Version

    data = _version_of(1024)
    version = benchmark(lambda: Version.decode(data, number=1))
    assert len(version.entries) == 1024


def test_bench_reader_open_local(benchmark, segment_ns: str) -> None:
    """Opening a local namespace through its first batch: dataset.json, the manifest's state, the first run's footers."""
    def first() -> torch.Tensor:
        return next(iter(TGBDataset(segment_ns, mesh=Mesh(0, 1))))["input_ids"]

    assert benchmark(first).shape == SHAPE
