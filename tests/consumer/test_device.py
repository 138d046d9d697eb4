"""Device delivery: CPU paths unchanged, a clear error without CUDA, exact resume one step ahead.

The tests marked ``needs_cuda`` run where a CUDA device is (a lent GPU
machine; ``benchmarks/gpu_checks.sh``): what ``device="cuda"`` delivers equals
what the CPU path delivers (uint32 tokens cast on the device, ragged keys,
derived keys), resume is exact with a real side stream, and the torch
derivation helpers documented for the device agree with the reader's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_tgb as tgb
from torch_tgb.consumer import ReaderOptions
from torch_tgb.consumer.device import DeviceFeed
from torch_tgb.layout import Layout, Mesh
from torch_tgb.producer import Producer

STEPS = 7
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def ns(tmp_path) -> str:
    path = str(tmp_path / "ns")
    with Producer(path, producer_id="p", layout=Layout(dp=2), commit_policy="fixed:3") as p:
        for offset in range(STEPS):
            p.append({"ids": torch.full((4, 8), offset, dtype=torch.int32), "w": torch.ones(4)}, offset=offset)
        p.close(seal=True)
    return path


def _steps(batches) -> list[int]:
    return [int(b["ids"][0, 0]) for b in batches]


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu")])
def test_cpu_delivery_is_unchanged(ns, device) -> None:
    loader = tgb.DataLoader(ns, mesh=Mesh(0, 2), device=device, options=ReaderOptions(dtype=torch.int64))
    batches = list(loader)
    assert _steps(batches) == list(range(STEPS))
    assert all(b["ids"].dtype == torch.int64 and b["ids"].device.type == "cpu" for b in batches)
    assert all(b["w"].dtype == torch.float32 for b in batches)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_without_cuda_is_a_clear_error(ns) -> None:
    with pytest.raises(ValueError, match="CUDA is not available"):
        tgb.DataLoader(ns, mesh=Mesh(0, 2), device="cuda")


class AheadOnCpu:
    """A DeviceFeed stand-in that runs one step ahead without a GPU (what CUDA delivery does)."""

    ahead = True
    dtype = None  # no cast on the "device"
    keep: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.issued = 0

    def issue(self, batch):
        self.issued += 1
        return batch

    def ready(self, issued):
        return issued


@pytest.mark.parametrize("stop_after", [1, 3, STEPS - 1])
def test_state_names_the_first_step_not_handed_out_while_one_is_in_flight(ns, stop_after) -> None:
    loader = tgb.DataLoader(ns, mesh=Mesh(1, 2))
    feed = AheadOnCpu()
    loader._feed = feed  # type: ignore[assignment]
    it = iter(loader)
    got = [int(next(it)["ids"][0, 0]) for _ in range(stop_after)]
    assert feed.issued == min(stop_after + 1, STEPS)  # the next step is already in flight
    state = loader.state_dict()
    resumed = tgb.DataLoader(ns, mesh=Mesh(1, 2))
    resumed.load_state_dict(state)
    assert got + _steps(resumed) == list(range(STEPS))


def test_device_feed_on_cpu_moves_and_casts() -> None:
    feed = DeviceFeed("cpu", dtype=torch.int64)
    out = list(feed(iter([{"a": torch.arange(3, dtype=torch.int32), "f": torch.zeros(2)}])))
    assert out[0]["a"].dtype == torch.int64 and out[0]["f"].dtype == torch.float32 and not feed.ahead


@needs_cuda
def test_cuda_delivery_one_step_ahead(ns) -> None:
    loader = tgb.DataLoader(ns, mesh=Mesh(0, 2), device="cuda", options=ReaderOptions(dtype=torch.int64))
    batches = list(loader)
    assert all(b["ids"].is_cuda and b["ids"].dtype == torch.int64 for b in batches)
    cpu = list(tgb.DataLoader(ns, mesh=Mesh(0, 2), options=ReaderOptions(dtype=torch.int64)))
    for g, c in zip(batches, cpu):
        g["ids"] += 1  # usable on the training stream
        assert torch.equal(g["ids"].cpu() - 1, c["ids"])


@needs_cuda
@pytest.mark.parametrize("how", [{"num_workers": 2}, {"options": ReaderOptions(dtype=torch.int64, inline_local=False)}])
def test_cuda_delivery_through_workers_and_the_reader_thread(ns, how) -> None:
    """Worker processes (forked after the feed made its CUDA stream) and the reader thread feed the device alike."""
    batches = list(tgb.DataLoader(ns, mesh=Mesh(0, 2), device="cuda", **how))
    assert _steps(batches) == list(range(STEPS))
    assert all(b["ids"].is_cuda for b in batches)


SEQ = 16


def _lengths(step: int, row: int) -> list[int]:
    """Sequences of a packed row (padding included), different per step and row."""
    n = (step * 5 + row * 3) % 7 + 1
    return [n, 1, SEQ - n - 3] if row % 2 else [SEQ - n]


@pytest.fixture
def mixed_ns(tmp_path) -> str:
    """uint32 token rows with ids past 2**31 (labels_from: one more token per row), their seq_lens, a ragged key."""
    path = str(tmp_path / "mixed")
    layout = Layout(dp=2, seq_keys=("input_ids",), labels_from="input_ids")
    with Producer(path, producer_id="p", layout=layout) as p:
        for step in range(STEPS):
            ids = torch.arange(4 * (SEQ + 1), dtype=torch.int64).reshape(4, SEQ + 1) + 2**32 - 200 - step * 100
            for r in range(4):  # a packer pads each row after its sequences with one pad id
                ids[r, sum(_lengths(step, r)) : SEQ] = 0
            p.append({"input_ids": ids.to(torch.uint32),
                      "seq_lens": [torch.tensor(_lengths(step, r), dtype=torch.int32) for r in range(4)],
                      "pix": [torch.full((r + step % 2, 3), r * 10 + step, dtype=torch.uint8) for r in range(4)]},
                     offset=step)
        p.close(seal=True)
    return path


@needs_cuda
@pytest.mark.parametrize("rank", [0, 1])
def test_cuda_delivers_what_the_cpu_path_delivers(mixed_ns, rank) -> None:
    """uint32 ids cast to int64 on the device (values past 2**31 kept), derived keys, ragged keys and offsets."""
    options = ReaderOptions(dtype=torch.int64, derive=("labels", "position_ids", "document_ids", "cu_seqlens"))
    gpu = list(tgb.DataLoader(mixed_ns, mesh=Mesh(rank, 2), device="cuda", options=options))
    cpu = list(tgb.DataLoader(mixed_ns, mesh=Mesh(rank, 2), options=options))
    assert len(gpu) == len(cpu) == STEPS
    assert int(cpu[0]["input_ids"].max()) > 2**31  # the cast must not wrap these
    assert {"pix", "pix_offsets", "labels", "position_ids"} <= set(cpu[0])
    for g, c in zip(gpu, cpu):
        assert g.keys() == c.keys()
        for key in c:
            assert g[key].is_cuda and g[key].dtype == c[key].dtype, key
            assert torch.equal(g[key].cpu(), c[key]), key


@needs_cuda
@pytest.mark.parametrize("stop_after", [1, 4, STEPS])
def test_cuda_resume_names_the_first_step_not_handed_out(ns, stop_after) -> None:
    """With the real side stream one step ahead, state taken after k steps resumes at step k, on either device."""
    loader = tgb.DataLoader(ns, mesh=Mesh(1, 2), device="cuda")
    it = iter(loader)
    got = [int(next(it)["ids"][0, 0]) for _ in range(stop_after)]
    state = loader.state_dict()
    for device in ("cuda", None):
        resumed = tgb.DataLoader(ns, mesh=Mesh(1, 2), device=device)
        resumed.load_state_dict(state)
        assert got + _steps(resumed) == list(range(STEPS))


@needs_cuda
@pytest.mark.parametrize("seed", range(20))
def test_the_torch_derivations_on_the_device_equal_the_readers(seed) -> None:
    """transforms.derive's torch functions (documented for the device) == the reader's numpy path, on CUDA."""
    from torch_tgb.layout import cp_ranges
    from torch_tgb.transforms.derive import (SequenceBounds, derived_arrays, document_ids, ignored_labels,
                                             mask_labels, position_ids, row_cu_seqlens)

    rng = np.random.default_rng(seed)
    seq_len, rows = 16, int(rng.integers(1, 7))
    lengths, offsets = [], [0]
    for _ in range(rows):
        room = seq_len
        for _ in range(int(rng.integers(0, 5))):
            n = int(rng.integers(0, room + 1))
            lengths.append(n)
            room -= n
        offsets.append(len(lengths))
    lens, offs = np.asarray(lengths, dtype=np.int32), np.asarray(offsets, dtype=np.int64)
    cp, rank = (1, 0) if seed % 3 == 0 else (2, seed % 2)
    ranges = [(int(lo * seq_len), int(hi * seq_len)) for lo, hi in cp_ranges(cp, "zigzag")[rank]]
    positions = torch.from_numpy(np.concatenate([np.arange(lo, hi) for lo, hi in ranges]))
    bounds = SequenceBounds(torch.from_numpy(lens).cuda(), torch.from_numpy(offs).cuda(), seq_len, positions.cuda())
    want = derived_arrays(lens, offs, seq_len, ranges, ("position_ids", "document_ids", "cu_seqlens"))
    assert np.array_equal(position_ids(bounds).cpu().numpy(), want["position_ids"])
    assert np.array_equal(document_ids(bounds).cpu().numpy(), want["document_ids"])
    assert np.array_equal(row_cu_seqlens(torch.from_numpy(lens).cuda(), torch.from_numpy(offs).cuda(), seq_len)
                          .cpu().numpy(), want["cu_seqlens"])
    raw = torch.from_numpy(rng.integers(0, 50_000, size=(rows, len(positions)))).to(torch.uint16)
    masked = mask_labels(raw.cuda(), bounds).cpu()
    ignored = np.zeros(masked.numel(), dtype=bool)
    ignored[ignored_labels(lens, offs, seq_len, ranges)] = True
    assert torch.equal(masked.flatten()[torch.from_numpy(ignored)], torch.full((int(ignored.sum()),), -100))
    assert torch.equal(masked.flatten()[torch.from_numpy(~ignored)], raw.long().flatten()[torch.from_numpy(~ignored)])
