"""Reading TGB objects from S3, GCS and Azure (loopback emulators): footer and slices by range reads."""

from __future__ import annotations

import pytest
import torch

from torch_tgb.errors import CorruptObject
from torch_tgb.format import SliceReader, read_footer, write_tgb
from torch_tgb.layout import Layout
from torch_tgb.storage import open_store

class CountingStore:
    """Wraps a store and counts range reads (delegates everything else)."""

    def __init__(self, inner):
        self.inner = inner
        self.ranges: list[tuple[str, int, int]] = []

    def get_range(self, key, start, end):
        self.ranges.append((key, start, end))
        return self.inner.get_range(key, start, end)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_footer_and_slices_by_range_reads(cloud_namespace):
    url, opts = cloud_namespace
    store = open_store(url, opts)
    layout = Layout(dp=2, cp=2, seq_keys=("ids",), cp_order="zigzag")
    batch = {"ids": torch.arange(4 * 16).reshape(4, 16), "w": torch.rand(4)}
    obj = write_tgb(store, "data/p/s3.tgb", layout.cut(batch), layout=layout)
    counting = CountingStore(store)
    footer = read_footer(counting, obj.key, size=obj.size, footer_offset=obj.footer_offset, footer_length=obj.footer_length)
    assert counting.ranges == [(obj.key, obj.footer_offset, obj.size)]  # exactly one read
    reader = SliceReader(counting)
    for s in layout.cut(batch):
        counting.ranges.clear()
        info = footer.slice(s.dp, s.cp)
        out = reader.read(obj.key, footer, info)
        assert counting.ranges == [(obj.key, info.start, info.end)]  # one range read per slice
        assert torch.equal(out["ids"], s.tensors["ids"]) and torch.equal(out["w"], s.tensors["w"])
    # without hints: size lookup + tail read
    assert read_footer(store, obj.key).num_slices == 4


def test_corrupt_object(cloud_namespace):
    url, opts = cloud_namespace
    store = open_store(url, opts)
    store.put("data/p/bad.tgb", b"\x00" * 5000)
    with pytest.raises(CorruptObject, match="bad.tgb"):
        read_footer(store, "data/p/bad.tgb")
