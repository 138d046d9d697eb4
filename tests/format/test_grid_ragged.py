"""``encode_batch`` of a batch with ragged keys (``_grid_ragged.py``) writes exactly the bytes of cut + encode."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb import Layout
from torch_tgb.format import encode_batch, encode_tgb, read_footer
from torch_tgb.format._grid_ragged import encode_ragged_grid
from torch_tgb.format._writer import _dtype
from torch_tgb.format._spec import PAGE_ALIGN_FROM
from torch_tgb.layout import RaggedRows
from torch_tgb.storage import MemoryStore

DTYPES = [torch.int32, torch.int64, torch.uint16, torch.uint8, torch.bool, torch.bfloat16, torch.float32]
KEY = "data/p/e000001-o000000000000-00000000.tgb"


def joined(buffers) -> bytes:
    return b"".join(bytes(b) for b in buffers)


@st.composite
def batches(draw):
    dp = draw(st.integers(1, 5))
    rows = dp * draw(st.integers(1, 3))
    seq = draw(st.integers(1, 9))
    batch = {"ids": torch.randint(0, 200, (rows, seq), dtype=torch.int64).to(draw(st.sampled_from(DTYPES)))}
    names = st.lists(st.sampled_from(["seq_lens", "provenance", "boxes"]), min_size=1, max_size=3, unique=True)
    for name in draw(names):
        inner = draw(st.sampled_from([(), (3,), (2, 2)]))
        counts = draw(st.lists(st.integers(0, 4), min_size=rows, max_size=rows))
        dtype = draw(st.sampled_from(DTYPES))
        values = torch.randint(0, 100, (sum(counts), *inner), dtype=torch.int64).to(dtype)
        if draw(st.booleans()):
            batch[name] = RaggedRows.from_lengths(values, counts)
        else:
            batch[name] = list(torch.split(values, counts))
    if draw(st.booleans()):
        batch["weight"] = torch.rand(rows)
    return batch, Layout(dp=dp, seq_keys=("ids",)), 64 * draw(st.integers(0, 70)), draw(st.booleans())


@settings(max_examples=80, deadline=None)
@given(batches())
def test_ragged_batches_are_written_as_cut_and_encode_writes_them(case) -> None:
    batch, layout, base, meta = case
    metadata = {"producer": "p", "n": 3} if meta else None
    old_buffers, old = encode_tgb(layout.cut(batch), base=base, key=KEY, metadata=metadata)
    assert encode_ragged_grid(batch, layout, base=base, key=KEY, metadata=metadata, dtype_of=_dtype) is not None
    new_buffers, new = encode_batch(batch, layout, base=base, key=KEY, metadata=metadata)
    assert new == old
    assert joined(new_buffers) == joined(old_buffers)


def test_a_large_ragged_batch_is_page_aligned_and_reads_back() -> None:
    layout = Layout(dp=2, seq_keys=("ids",))
    values = torch.arange(PAGE_ALIGN_FROM // 8 + 6, dtype=torch.int64)
    batch = {"ids": torch.zeros(4, 8, dtype=torch.int32),
             "tok": RaggedRows.from_lengths(values, [1, len(values) - 3, 2, 0])}
    buffers, obj = encode_batch(batch, layout, base=192, key=KEY)
    assert joined(buffers) == joined(encode_tgb(layout.cut(batch), base=192, key=KEY)[0])
    store = MemoryStore("grid")
    store.put(KEY, bytes(192) + joined(buffers))
    footer = read_footer(store, KEY, size=obj.size, footer_offset=obj.footer_offset, footer_length=obj.footer_length)
    assert [s.start % 4096 for s in footer.slices()] == [0, 0]


def test_cp_and_dense_batches_are_left_to_the_other_paths() -> None:
    ragged = RaggedRows.from_lengths(torch.arange(3), [1, 2])
    dense = {"ids": torch.zeros(2, 4, dtype=torch.int32)}
    assert encode_ragged_grid(dense, Layout(dp=2), base=0, key=KEY, metadata=None, dtype_of=_dtype) is None
    cp = Layout(dp=1, cp=2, seq_keys=("ids",))
    assert encode_ragged_grid({**dense, "tok": ragged}, cp, base=0, key=KEY, metadata=None, dtype_of=_dtype) is None


def test_the_payload_is_copied() -> None:
    layout = Layout(dp=2, seq_keys=("ids",))
    values = torch.arange(6)
    batch = {"ids": torch.arange(8, dtype=torch.int32).reshape(2, 4), "tok": RaggedRows.from_lengths(values, [2, 4])}
    before = joined(encode_batch(batch, layout)[0])
    buffers, _ = encode_batch(batch, layout)
    values.fill_(-1)
    batch["ids"].fill_(-1)
    assert joined(buffers) == before
