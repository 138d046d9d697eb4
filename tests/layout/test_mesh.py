"""Mesh: validation, rank resolution from the environment and from a DeviceMesh."""

from __future__ import annotations

import itertools

import pytest
import torch

from torch_tgb.errors import LayoutError
from torch_tgb.layout import Mesh, resolve_rank_world


def test_mesh_defaults_and_validation():
    assert Mesh(dp_rank=1, dp_size=4) == Mesh(1, 4, 0, 1)
    for args in [(4, 4), (-1, 2), (0, 0), (0, 2, 2, 2), (0, 1, 0, 0)]:
        with pytest.raises(LayoutError):
            Mesh(*args)
    with pytest.raises(LayoutError):
        Mesh(dp_rank=0.0, dp_size=1)  # type: ignore[arg-type]


def test_resolve_order(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert resolve_rank_world() == (3, 8)
    assert resolve_rank_world(1, 2) == (1, 2)  # explicit wins
    assert resolve_rank_world(env={}) == (0, 1)
    with pytest.raises(LayoutError, match="RANK"):
        resolve_rank_world(env={"RANK": "x"})
    with pytest.raises(LayoutError):
        resolve_rank_world(env={"RANK": "8", "WORLD_SIZE": "8"})


def test_from_env_row_major_pp_dp_cp_tp(monkeypatch):
    pp, dp, cp, tp = 2, 3, 2, 2
    world = pp * dp * cp * tp
    seen = {}
    for rank in range(world):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))
        mesh = Mesh.from_env(dp=dp, cp=cp, tp=tp, pp=pp)
        seen[rank] = mesh
    # the same coordinates init_device_mesh(("pp","dp","cp","tp")) gives: arange(world).view(pp, dp, cp, tp)
    grid = torch.arange(world).view(pp, dp, cp, tp)
    for p, d, c, t in itertools.product(range(pp), range(dp), range(cp), range(tp)):
        assert seen[int(grid[p, d, c, t])] == Mesh(d, dp, c, cp)
    # ranks differing only in tp/pp read the same slice
    assert seen[0] == seen[1] == seen[dp * cp * tp]


def test_from_env_infers_dp_and_checks_product():
    assert Mesh.from_env(cp=2, tp=2, rank=5, world_size=16) == Mesh(1, 4, 0, 2)
    with pytest.raises(LayoutError, match="world_size=8"):
        Mesh.from_env(dp=3, rank=0, world_size=8)
    with pytest.raises(LayoutError):
        Mesh.from_env(cp=0, rank=0, world_size=1)


class FakeDeviceMesh:
    """Duck-typed DeviceMesh: names, sizes, this rank's coordinates."""

    def __init__(self, names, sizes, coords):
        self.mesh_dim_names = names
        self._sizes, self._coords = sizes, coords

    def size(self, mesh_dim):
        return self._sizes[mesh_dim]

    def get_local_rank(self, mesh_dim):
        return self._coords[mesh_dim]


def test_from_device_mesh():
    dm = FakeDeviceMesh(("pp", "dp", "cp", "tp"), (2, 4, 2, 2), (1, 3, 1, 0))
    assert Mesh.from_device_mesh(dm) == Mesh(3, 4, 1, 2)
    assert Mesh.from_device_mesh(dm, cp=None) == Mesh(3, 4, 0, 1)
    hsdp = FakeDeviceMesh(("dp_replicate", "dp_shard", "tp"), (2, 4, 2), (1, 2, 1))
    assert Mesh.from_device_mesh(hsdp, dp=("dp_replicate", "dp_shard")) == Mesh(6, 8, 0, 1)
    with pytest.raises(LayoutError, match="data"):
        Mesh.from_device_mesh(dm, dp="data")


def test_from_real_device_mesh(tmp_path):
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.device_mesh import init_device_mesh

    if dist.is_initialized():
        pytest.skip("a process group already exists")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        dm = init_device_mesh("cpu", (1, 1, 1, 1), mesh_dim_names=("pp", "dp", "cp", "tp"))
        assert Mesh.from_device_mesh(dm) == Mesh(0, 1, 0, 1)
        assert resolve_rank_world(env={"RANK": "5", "WORLD_SIZE": "9"}) == (0, 1)  # dist wins over env
    finally:
        dist.destroy_process_group()
