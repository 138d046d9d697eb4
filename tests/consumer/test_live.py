"""A consumer faster than its producer waits, records the stall, and continues."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from tests.consumer._support import LAYOUT, make_batch
from torch_tgb.consumer import DataLoader, TGBDataset
from torch_tgb.consumer import ReaderOptions
from torch_tgb.errors import DataTimeout
from torch_tgb.layout import Mesh
from torch_tgb.producer import Producer


def slow_producer(ns: str, n: int, delay: float, *, seal: bool = True, start_delay: float = 0.0) -> threading.Thread:
    def run() -> None:
        time.sleep(start_delay)
        with Producer(ns, producer_id="slow", layout=LAYOUT, commit_policy="naive") as p:
            for offset in range(n):
                time.sleep(delay)
                p.append(make_batch(offset), offset=offset)
                p.flush()
            if seal:
                p.close(seal=True)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("prefetch", [0, 2])
def test_consumer_waits_for_producer_and_records_stall(tmp_path, prefetch: int) -> None:
    ns = str(tmp_path)
    producer = slow_producer(ns, 5, 0.15, start_delay=0.2)  # dataset.json does not exist yet
    ds = TGBDataset(ns, mesh=Mesh(1, 2, 0, 2), prefetch=prefetch, timeout=10,
                    options=ReaderOptions(inline_local=prefetch == 0))  # prefetch threads wait too
    got = list(ds)
    producer.join(10)
    assert len(got) == 5
    for step, batch in enumerate(got):
        assert torch.equal(batch["input_ids"], LAYOUT.cut(make_batch(step))[2].tensors["input_ids"])
    stats = ds.stats()
    assert stats.steps == 5
    assert stats.stall_s > 0.3  # five steps 0.15 s apart: the reader mostly waited
    assert stats.poll_wait_s > 0.3
    assert stats.manifest_polls > 5


def test_loader_with_workers_follows_a_live_producer(tmp_path) -> None:
    ns = str(tmp_path)
    producer = slow_producer(ns, 4, 0.1)
    loader = DataLoader(ns, mesh=Mesh(0, 2, 1, 2), num_workers=2, timeout=10)
    got = list(loader)
    producer.join(10)
    assert [int(b["sample_id"][0]) // 1000 for b in got] == [0, 1, 2, 3]
    assert loader.stats().stall_s > 0.1


def test_timeout_while_producer_stalls(tmp_path) -> None:
    ns = str(tmp_path)
    producer = slow_producer(ns, 2, 0.05, seal=False)
    producer.join(10)
    ds = TGBDataset(ns, mesh=Mesh(0, 2, 0, 2), timeout=0.5, prefetch=2, options=ReaderOptions(inline_local=False))
    it = iter(ds)
    assert len([next(it), next(it)]) == 2
    started = time.monotonic()
    with pytest.raises(DataTimeout, match="last version seen"):
        next(it)
    assert time.monotonic() - started >= 0.45
