"""Device delivery: CPU paths unchanged, a clear error without CUDA, exact resume one step ahead."""

from __future__ import annotations

import pytest
import torch

import torch_tgb as tgb
from torch_tgb.consumer.dataset import ReaderOptions
from torch_tgb.consumer.device import DeviceFeed
from torch_tgb.layout import Layout, Mesh
from torch_tgb.producer import Producer

STEPS = 7


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_delivery_one_step_ahead(ns) -> None:
    loader = tgb.DataLoader(ns, mesh=Mesh(0, 2), device="cuda", options=ReaderOptions(dtype=torch.int64))
    batches = list(loader)
    assert all(b["ids"].is_cuda and b["ids"].dtype == torch.int64 for b in batches)
    cpu = list(tgb.DataLoader(ns, mesh=Mesh(0, 2), options=ReaderOptions(dtype=torch.int64)))
    for g, c in zip(batches, cpu):
        g["ids"] += 1  # usable on the training stream
        assert torch.equal(g["ids"].cpu() - 1, c["ids"])
