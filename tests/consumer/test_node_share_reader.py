"""Readers over the node share (``ReaderOptions(node_cache=...)``): same batches, the manifest read once per node."""

from __future__ import annotations

import pytest
import torch
from _support import produce

import torch_tgb as tgb
from torch_tgb.consumer.options import ReaderOptions
from torch_tgb.storage import LatencyStore, LocalStore
from torch_tgb.testing.counting import CountingStore

MESHES = [tgb.Mesh(dp, 2, cp, 2) for dp in range(2) for cp in range(2)]


def _same(got, want):
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_ranks_of_a_node_read_the_manifest_once(tmp_path):
    root = tmp_path / "ns"
    produce(str(root), 6, policy="fixed:1")
    remote = CountingStore(LatencyStore(LocalStore(root), rtt=0.0, bandwidth=0))  # remote-like: no local path
    plain = {m: list(tgb.TGBDataset(remote, mesh=m)) for m in MESHES}  # a store handed in: used as it is
    without = remote.report()["by_class"]["log"]["requests"]
    remote.reset()
    shared = ReaderOptions(node_cache=str(tmp_path / "node"))
    for mesh in MESHES:
        _same(list(tgb.TGBDataset(remote, mesh=mesh, options=shared)), plain[mesh])
    with_share = remote.report()["by_class"]["log"]["requests"]
    assert with_share < without / 2, (with_share, without)
    assert remote.report()["by_class"]["data"]["requests"] > 0


def test_a_local_namespace_is_read_without_it(tmp_path):
    root = tmp_path / "ns"
    produce(str(root), 2)
    node = tmp_path / "node"
    _same(list(tgb.TGBDataset(str(root), mesh=MESHES[0], node_cache=str(node))),
          list(tgb.TGBDataset(str(root), mesh=MESHES[0], node_cache=None)))
    assert not node.exists()  # a local directory: the page cache serves the node already


def test_node_cache_is_checked():
    with pytest.raises(TypeError, match="node_cache"):
        ReaderOptions(node_cache=3)  # type: ignore[arg-type]
    assert ReaderOptions().node_cache is True and ReaderOptions(node_cache=None).node_cache is None
