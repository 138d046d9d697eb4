"""Where a training rank sits: ``Mesh`` and the one rank/world resolver.

Rank ordering. ``Mesh.from_env`` treats the world as a row-major grid with
dims ``(pp, dp, cp, tp)`` -- ``tp`` varies fastest -- which is exactly what
``torch.distributed.device_mesh.init_device_mesh(device, (pp, dp, cp, tp),
mesh_dim_names=("pp", "dp", "cp", "tp"))`` builds::

    rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank

Ranks that differ only in ``tp``/``pp`` get the same ``Mesh`` and so read the
same slice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch_tgb.errors import LayoutError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["Mesh", "resolve_rank_world"]


def resolve_rank_world(
    rank: int | None = None, world_size: int | None = None, *, env: Mapping[str, str] | None = None
) -> tuple[int, int]:
    """``(rank, world_size)``: explicit arguments, then ``torch.distributed``, then ``RANK``/``WORLD_SIZE``.

    Falls back to a single process ``(0, 1)`` when nothing says otherwise.
    """
    if rank is None or world_size is None:
        dist_rank: int | None = None
        dist_world: int | None = None
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist_rank, dist_world = dist.get_rank(), dist.get_world_size()
        except ImportError:  # torch built without distributed
            pass
        environ = os.environ if env is None else env
        if rank is None:
            rank = dist_rank if dist_rank is not None else _env_int(environ, "RANK", 0)
        if world_size is None:
            world_size = dist_world if dist_world is not None else _env_int(environ, "WORLD_SIZE", 1)
    if world_size < 1 or not (0 <= rank < world_size):
        raise LayoutError(f"invalid rank/world size: rank={rank}, world_size={world_size}")
    return rank, world_size


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise LayoutError(f"environment variable {name}={value!r} is not an integer") from None


@dataclass(frozen=True)
class Mesh:
    """This rank's data-parallel and context-parallel position."""

    dp_rank: int
    dp_size: int
    cp_rank: int = 0
    cp_size: int = 1

    def __post_init__(self) -> None:
        for name in ("dp_rank", "dp_size", "cp_rank", "cp_size"):
            if not isinstance(getattr(self, name), int) or isinstance(getattr(self, name), bool):
                raise LayoutError(f"Mesh.{name} must be an int, got {getattr(self, name)!r}")
        if self.dp_size < 1 or not (0 <= self.dp_rank < self.dp_size):
            raise LayoutError(f"invalid dp position: dp_rank={self.dp_rank}, dp_size={self.dp_size}")
        if self.cp_size < 1 or not (0 <= self.cp_rank < self.cp_size):
            raise LayoutError(f"invalid cp position: cp_rank={self.cp_rank}, cp_size={self.cp_size}")

    @classmethod
    def from_env(
        cls,
        *,
        dp: int | None = None,
        cp: int = 1,
        tp: int = 1,
        pp: int = 1,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> Mesh:
        """This rank's position in a row-major ``(pp, dp, cp, tp)`` world (see module docstring).

        ``dp=None`` means whatever is left: ``world_size // (pp * cp * tp)``.
        """
        rank, world_size = resolve_rank_world(rank, world_size)
        for name, value in (("cp", cp), ("tp", tp), ("pp", pp)):
            if value < 1:
                raise LayoutError(f"Mesh.from_env: {name}={value} must be >= 1")
        if dp is None:
            dp = world_size // (pp * cp * tp)
        if dp < 1 or pp * dp * cp * tp != world_size:
            raise LayoutError(
                f"Mesh.from_env: pp={pp} x dp={dp} x cp={cp} x tp={tp} != world_size={world_size}"
            )
        cp_rank = (rank // tp) % cp
        dp_rank = (rank // (tp * cp)) % dp
        return cls(dp_rank=dp_rank, dp_size=dp, cp_rank=cp_rank, cp_size=cp)

    @classmethod
    def from_device_mesh(
        cls, device_mesh: DeviceMesh, *, dp: str | tuple[str, ...] | None = "dp", cp: str | tuple[str, ...] | None = "cp"
    ) -> Mesh:
        """Position from a ``torch.distributed.DeviceMesh`` with named dims.

        ``dp``/``cp`` name a mesh dim, or a tuple of dims flattened row-major
        (e.g. ``("dp_replicate", "dp_shard")`` for HSDP). A missing ``dp`` dim is
        an error (a typo would silently change the partitioning); a missing
        ``cp`` dim, or ``cp=None``, means no context parallelism.
        """
        names = tuple(device_mesh.mesh_dim_names or ())

        def position(dims: str | tuple[str, ...] | None, required: bool) -> tuple[int, int]:
            if dims is None:
                return 0, 1
            wanted = (dims,) if isinstance(dims, str) else tuple(dims)
            missing = [d for d in wanted if d not in names]
            if missing:
                if required:
                    raise LayoutError(f"DeviceMesh has dims {names}, not {missing} (dp={dims!r})")
                return 0, 1
            rank, size = 0, 1
            for d in wanted:
                i = names.index(d)
                rank = rank * device_mesh.size(i) + device_mesh.get_local_rank(i)
                size *= device_mesh.size(i)
            return rank, size

        dp_rank, dp_size = position(dp, required=True)
        cp_rank, cp_size = position(cp, required=False)
        return cls(dp_rank=dp_rank, dp_size=dp_size, cp_rank=cp_rank, cp_size=cp_size)
