"""pack_step / SharedStep: a step's tensors in one shared buffer and back, exactly."""

from __future__ import annotations

import multiprocessing as mp

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.consumer._shared_step import ALIGN, SharedStep, pack_step

DTYPES = [torch.uint8, torch.int16, torch.uint32, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]


def tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int, transpose: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, 2 if dtype == torch.bool else 100, shape, generator=g, dtype=torch.int64).to(dtype)
    return t.t() if transpose and t.dim() == 2 else t


steps = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=4),
    st.builds(tensor, st.sampled_from(DTYPES), st.lists(st.integers(0, 7), max_size=3).map(tuple),
              st.integers(0, 1000), st.booleans()),
    min_size=2, max_size=5,
)


def equal(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a
    )


@settings(max_examples=150, deadline=None)
@given(steps)
def test_unpack_gives_back_the_step(step) -> None:
    packed = pack_step(step)
    assert isinstance(packed, SharedStep) and packed.buffer.is_shared()
    out = packed.unpack()
    assert equal(out, step)
    assert all(offset % ALIGN == 0 for _, _, _, offset, _ in packed.specs)
    # views of the one buffer: writing through one tensor changes nothing of the others
    first = next(iter(out))
    if out[first].numel():
        out[first].zero_()
        assert equal({k: v for k, v in out.items() if k != first}, {k: v for k, v in step.items() if k != first})


def test_what_is_not_a_dict_of_several_cpu_tensors_passes_through() -> None:
    one = {"a": torch.zeros(2)}  # one tensor: one handover either way
    for step in ({}, one, {"a": torch.zeros(2), "n": 3}, [torch.zeros(2)], torch.zeros(2), "text"):
        assert pack_step(step) is step


def _describe(queue_in, queue_out) -> None:
    """In the other process: what the received step holds, as plain values."""
    got = queue_in.get().unpack()
    queue_out.put({k: (str(t.dtype), tuple(t.shape), t.tolist()) for k, t in got.items()})


def test_a_packed_step_crosses_processes_with_its_values() -> None:
    step = {"input_ids": torch.arange(12, dtype=torch.int64).view(3, 4), "mask": torch.tensor([True, False])}
    ctx = torch.multiprocessing.get_context("spawn" if mp.get_start_method() != "fork" else "fork")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_describe, args=(q_in, q_out))
    proc.start()
    q_in.put(pack_step(step))
    seen = q_out.get(timeout=60)
    proc.join(timeout=60)
    assert seen == {k: (str(t.dtype), tuple(t.shape), t.tolist()) for k, t in step.items()}
