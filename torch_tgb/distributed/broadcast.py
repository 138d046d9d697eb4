"""One read per TP/PP group: one rank reads the group's slice, the others receive it (OVERLORD ``broadcast_at``).

Ranks that differ only in tensor or pipeline parallelism read the same
(dp, cp) slice: without this, a TP-8 job fetches every byte eight times. With
``GroupBroadcast(loader, group=g)``, the group's first rank (its *source*)
iterates ``loader`` and broadcasts each batch over ``g``; the other ranks never
iterate theirs, so they send no request to the store. Per step the source
broadcasts one small header (each tensor's name, dtype and shape, the
non-tensor values, and its loader's state) and then each tensor, on the
group's device (``nccl``: CUDA tensors; ``gloo``: CPU).

Checkpoints stay exact: every rank's ``state_dict()`` is the source's state
after the last step it delivered (carried in the header), so any rank can
resume as the source after a restart, also with another group layout. An
error on the source (a corrupt step, a timeout) is broadcast as well: every
rank raises it, none waits forever.

    tp = device_mesh["tp"].get_group()
    loader = GroupBroadcast(tgb.DataLoader(ns, mesh=mesh), group=tp)

``groups_of`` builds the groups of ranks that share a slice for a
``(pp, dp, cp, tp)`` world when there is no ``DeviceMesh`` (every rank must
call it, as for any ``new_group``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from torch_tgb.errors import TGBError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["GroupBroadcast", "groups_of"]

_END, _ERROR = "end", "error"


class GroupBroadcast:
    """Iterate ``loader`` on the first rank of ``group``; hand its batches to every rank of the group."""

    def __init__(self, loader: Any, *, group: ProcessGroup | None) -> None:
        import torch.distributed as dist

        self.loader = loader
        self.group = group
        self._active = group is not None and dist.is_available() and dist.is_initialized() \
            and dist.get_world_size(group) > 1
        self.source = dist.get_global_rank(group, 0) if group is not None and self._active else None
        self.is_source = not self._active or dist.get_rank() == self.source
        self._state: dict[str, Any] | None = None  # a receiver's: the source's state after the last step

    def __iter__(self) -> Iterator[Any]:
        if self.is_source:
            return self._send()
        return self._receive()

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict[str, Any]:
        """The source's loader state after the last step this rank delivered (the same on every rank)."""
        if self.is_source:
            return dict(self.loader.state_dict())
        if self._state is None:
            return dict(self.loader.state_dict())  # nothing received yet: where a fresh reader starts
        return dict(self._state)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.loader.load_state_dict(state)
        self._state = None if self.is_source else dict(state)

    # --- the source ---------------------------------------------------------------

    def _send(self) -> Iterator[Any]:
        it = iter(self.loader)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                if self._active:
                    self._header({"kind": _END})
                return
            except BaseException as e:
                if self._active:
                    self._header({"kind": _ERROR, "error": f"{type(e).__name__}: {e}"})
                raise
            if self._active:
                self._broadcast(batch)
            yield batch

    def _broadcast(self, batch: Any) -> None:
        if not isinstance(batch, Mapping):
            raise TypeError(f"GroupBroadcast hands on dict batches, got {type(batch).__name__}")
        tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        header = {
            "kind": "batch",
            "tensors": [(k, str(t.dtype).removeprefix("torch."), tuple(t.shape), t.device.type)
                        for k, t in tensors.items()],
            "values": {k: v for k, v in batch.items() if not isinstance(v, torch.Tensor)},
            "state": self.loader.state_dict(),
        }
        self._header(header)
        import torch.distributed as dist

        for t in tensors.values():
            dist.broadcast(t.contiguous(), src=self.source, group=self.group)

    def _header(self, header: dict[str, Any] | None) -> dict[str, Any]:
        import torch.distributed as dist

        box = [header]
        dist.broadcast_object_list(box, src=self.source, group=self.group)
        assert isinstance(box[0], dict)
        return box[0]

    # --- a receiver ---------------------------------------------------------------

    def _receive(self) -> Iterator[Any]:
        import torch.distributed as dist

        while True:
            header = self._header(None)
            if header["kind"] == _END:
                return
            if header["kind"] == _ERROR:
                raise TGBError(f"rank {self.source} (the reader of this rank's group) failed: {header['error']}")
            batch: dict[str, Any] = dict(header["values"])
            for name, dtype, shape, device_type in header["tensors"]:
                device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" \
                    else torch.device("cpu")
                t = torch.empty(shape, dtype=getattr(torch, dtype), device=device)
                dist.broadcast(t, src=self.source, group=self.group)
                batch[name] = t
            self._state = header["state"]
            yield batch


def groups_of(*, pp: int = 1, dp: int, cp: int = 1, tp: int = 1) -> ProcessGroup | None:
    """This rank's group of the ranks that read its (dp, cp) slice in a row-major ``(pp, dp, cp, tp)`` world.

    Every rank must call it (it creates every group). None when each slice has one rank (``pp * tp == 1``).
    """
    import torch.distributed as dist

    world = pp * dp * cp * tp
    if dist.get_world_size() != world:
        raise ValueError(f"groups_of: pp={pp} x dp={dp} x cp={cp} x tp={tp} != world size {dist.get_world_size()}")
    if pp * tp == 1:
        return None
    groups = [[((p * dp + d) * cp + c) * tp + t for p in range(pp) for t in range(tp)]
              for d in range(dp) for c in range(cp)]
    mine, _ = dist.new_subgroups_by_enumeration(groups)
    return mine
