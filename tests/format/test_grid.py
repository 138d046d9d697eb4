"""``encode_batch`` (no Python object per slice) writes exactly the bytes of ``encode_tgb(layout.cut(batch))``."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb import Layout
from torch_tgb.format import encode_batch, encode_tgb, read_footer
from torch_tgb.format._spec import PAGE_ALIGN_FROM
from torch_tgb.storage import MemoryStore

DTYPES = [torch.int32, torch.int64, torch.uint16, torch.uint8, torch.bool, torch.bfloat16, torch.float32]


def joined(buffers) -> bytes:
    return b"".join(bytes(b) for b in buffers)


KEY = "data/p/e000001-o000000000000-00000000.tgb"


def both(batch, layout, base=0, key=KEY):
    old_buffers, old = encode_tgb(layout.cut(batch), base=base, key=key)
    new_buffers, new = encode_batch(batch, layout, base=base, key=key)
    return (joined(old_buffers), old), (joined(new_buffers), new)


@st.composite
def batches(draw):
    dp = draw(st.integers(1, 6))
    cp = draw(st.sampled_from([1, 2, 3]))
    order = draw(st.sampled_from(["contiguous", "zigzag"]))
    labels_from = draw(st.sampled_from([None, "ids"]))
    rows = dp * draw(st.integers(1, 3))
    seq = 2 * cp * draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(DTYPES))
    ids = torch.randint(0, 200, (rows, seq + (labels_from is not None)), dtype=torch.int64).to(dtype)
    batch = {"ids": ids}
    if draw(st.booleans()):  # a second seq key with an inner dim
        batch["emb"] = torch.randn(rows, seq, draw(st.integers(1, 3))).to(draw(st.sampled_from(DTYPES)))
    if draw(st.booleans()):  # a per-row key, the same in every cp slice
        batch["weight"] = torch.rand(rows).to(draw(st.sampled_from(DTYPES)))
    seq_keys = tuple(k for k in ("ids", "emb") if k in batch)
    layout = Layout(dp=dp, cp=cp, seq_keys=seq_keys, cp_order=order, labels_from=labels_from)
    return batch, layout, 64 * draw(st.integers(0, 70))


@settings(max_examples=80, deadline=None)
@given(batches())
def test_the_grid_writes_the_bytes_of_cut_and_encode(case) -> None:
    batch, layout, base = case
    (old_bytes, old), (new_bytes, new) = both(batch, layout, base)
    assert new == old
    assert new_bytes == old_bytes


def test_large_slices_are_page_aligned_as_before() -> None:
    layout = Layout(dp=2, seq_keys=("ids",))
    batch = {"ids": torch.arange(2 * PAGE_ALIGN_FROM // 4, dtype=torch.int32).reshape(2, -1)}
    (old_bytes, old), (new_bytes, new) = both(batch, layout, base=192)
    assert new == old and new_bytes == old_bytes
    store = MemoryStore("grid")
    store.put(KEY, bytes(192) + new_bytes)
    footer = read_footer(store, KEY, size=new.size, footer_offset=new.footer_offset, footer_length=new.footer_length)
    assert [s.start % 4096 for s in footer.slices()] == [0, 0]


def test_ragged_and_empty_batches_take_the_slice_path() -> None:
    layout = Layout(dp=2, seq_keys=("ids",))
    ragged = {"ids": torch.zeros(2, 4, dtype=torch.int32), "tok": [torch.arange(3), torch.arange(5)]}
    (old_bytes, old), (new_bytes, new) = both(ragged, layout)
    assert new == old and new_bytes == old_bytes


def test_the_payload_is_copied() -> None:
    layout = Layout(dp=2, cp=2, seq_keys=("ids",))
    batch = {"ids": torch.arange(32, dtype=torch.int32).reshape(4, 8)}
    buffers, _ = encode_batch(batch, layout)
    before = joined(buffers)
    batch["ids"].zero_()  # a producer reuses its batch buffer after append
    assert joined(buffers) == before
