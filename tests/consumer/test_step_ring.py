"""Workers hand steps over through a ring of shared slots (no descriptor per step) and read on the run path."""

from __future__ import annotations

import multiprocessing as mp
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from multiprocessing import resource_sharer

import torch_tgb as tgb
from torch_tgb.consumer import _step_ring
from torch_tgb.consumer._paths import RunPath
from torch_tgb.consumer._shared_step import SharedStep
from torch_tgb.consumer._step_ring import RingStep, ring_slots, send_step

STEPS = 24


@pytest.fixture(scope="module")
def ns(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("ring") / "ns")
    tokens = np.random.default_rng(0).integers(1, 1000, size=STEPS * 4 * 16 + 1).astype(np.uint16)
    tgb.write_dataset(path, tokens, layout=tgb.Layout(dp=1), seq_len=16, global_batch_size=4, packing="none",
                      progress=False)
    return path


def descriptors_received(monkeypatch) -> list[int]:  # noqa: ANN001
    """A list that grows by one per file descriptor this process receives from another (shared storages)."""
    received: list[int] = []
    detach = resource_sharer.DupFd.detach

    def counted(self):  # noqa: ANN001, ANN202 - on the class: pickles of DupFd in other processes are unchanged
        received.append(1)
        return detach(self)

    monkeypatch.setattr(resource_sharer.DupFd, "detach", counted)
    return received


def step_of(i: int) -> dict[str, torch.Tensor]:
    """A step whose size changes (slots grow) and whose values name it."""
    n = 3 + (i % 4) * 5
    return {"input_ids": torch.arange(n, dtype=torch.int64) + 1000 * i, "mask": torch.full((i % 3 + 1,), i % 2 == 0)}


def _worker(slots: int, count: int, out, acks) -> None:  # noqa: ANN001
    for i in range(count):
        if i >= slots - 1:
            acks.get()  # as the loader does: a step is asked for once the one slots - 1 before it is received
        out.put(send_step(step_of(i), slots=slots))
    out.put(None)


def test_steps_cross_through_the_ring_with_a_descriptor_per_slot_not_per_step(monkeypatch) -> None:
    received = descriptors_received(monkeypatch)
    ctx = torch.multiprocessing.get_context("fork")
    queue, acks = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_worker, args=(3, 20, queue, acks))
    proc.start()
    steps = []
    while (item := queue.get(timeout=60)) is not None:
        assert type(item) is SharedStep and not item.buffer.is_shared()  # copied out of the slot on receipt
        acks.put(True)
        steps.append(item.unpack())
    proc.join(timeout=60)
    assert len(steps) == 20
    for i, got in enumerate(steps):  # held steps are not overwritten by later ones through the same slot
        want = step_of(i)
        assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    # each of the 3 slots once, and again only when a step outgrows it (sizes 3..18 int64 + a bool mask)
    assert 3 <= len(received) < 20


def test_what_is_not_a_step_of_tensors_passes_through() -> None:
    for step in ({}, {"a": torch.zeros(2)}, {"a": torch.zeros(2), "n": 3}, "text"):
        assert send_step(step, slots=3) is step


def test_a_slot_never_mapped_is_refused_by_name() -> None:
    step = send_step(step_of(0), slots=2)
    assert isinstance(step, RingStep)
    with pytest.raises(tgb.TGBError, match="slot 1 of a step ring"):
        _step_ring.receive_step(step.pid, step.token + 1, 1, None, step.specs, step.nbytes)


def test_slots_cover_what_the_loader_asks_ahead() -> None:
    assert ring_slots(num_workers=2, prefetch_factor=2) == 5
    assert ring_slots(num_workers=1, prefetch_factor=1) == 2


def test_a_loader_with_workers_receives_no_descriptor_per_step(ns, monkeypatch) -> None:
    received = descriptors_received(monkeypatch)
    plain = list(tgb.DataLoader(ns, tgb.Mesh(0, 1), dtype=torch.int64))
    held = list(tgb.DataLoader(ns, tgb.Mesh(0, 1), dtype=torch.int64, num_workers=2,
                               multiprocessing_context="fork"))
    assert len(held) == len(plain) > 2 * ring_slots(num_workers=2, prefetch_factor=2)
    for a, b in zip(held, plain):  # every step kept by the loop is still the step it was handed
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert len(received) <= 2 * ring_slots(num_workers=2, prefetch_factor=2)  # per slot, not per step


def test_a_worker_reads_its_own_steps_on_the_run_path(ns, monkeypatch) -> None:
    """Worker 1 of 2 takes the run path, hands out steps 1, 3, 5, ... and stands where the step path stands."""
    import torch_tgb.consumer._paths as paths
    import torch_tgb.consumer.dataset as dataset

    everything = list(tgb.TGBDataset(ns, tgb.Mesh(0, 1)))
    info = SimpleNamespace(id=1, num_workers=2, seed=0, dataset=None)
    monkeypatch.setattr(dataset, "get_worker_info", lambda: info)
    monkeypatch.setattr(paths, "get_worker_info", lambda: info)

    def read(runs: bool) -> tuple[list[dict], list[dict], set[str]]:
        ds = tgb.TGBDataset(ns, tgb.Mesh(0, 1), runs=runs)
        out, states, kinds = [], [], set()
        for batch in ds:
            kinds.add(type(ds.path).__name__)
            out.append(batch)
            states.append({k: v for k, v in ds.state_dict().items() if k != "stats"})
        return out, states, kinds

    batches, states, kinds = read(True)
    step_batches, step_states, step_kinds = read(False)
    assert kinds == {RunPath.__name__} and step_kinds == {"StepPath"}
    assert len(batches) == len(everything) // 2 and len(step_batches) == len(batches)
    for a, b, c in zip(batches, step_batches, everything[1::2]):
        assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]) for k in a)
    assert states == step_states


def test_the_ring_of_a_forked_child_is_its_own() -> None:
    first = send_step(step_of(0), slots=2)
    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def child() -> None:
        q.put(send_step(step_of(1), slots=2).token)  # type: ignore[union-attr]

    proc = ctx.Process(target=child)
    proc.start()
    token = q.get(timeout=60)
    proc.join(timeout=60)
    assert token != first.token  # type: ignore[union-attr]
