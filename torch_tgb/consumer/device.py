"""Device delivery: each step's tensors copied to the accelerator one step ahead.

``tgb.DataLoader(..., device="cuda")`` runs its batches through a
:class:`DeviceFeed`: every tensor of step ``i + 1`` is copied into pinned
host memory (unless already pinned) and issued to the device with
``non_blocking=True`` on a side CUDA stream while the trainer still works on
step ``i``; an integer ``dtype`` cast (e.g. uint32 tokens -> int64) runs on the
device, on that stream. When step ``i + 1`` is handed out, the training
(current) stream waits for the side stream, and every tensor is
``record_stream``-ed on it, so the caching allocator never reuses its memory
while the training stream may still read it.

``device=None`` or ``"cpu"`` delivers as before (a ``dtype`` cast on the
CPU); ``"cuda"`` without CUDA raises ``ValueError`` at construction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from torch_tgb.format import cast_integers, cast_tensor, is_integer

__all__ = ["DeviceFeed", "cast_integers"]


class DeviceFeed:
    """Moves dict-of-tensor batches to ``device``; on CUDA one step ahead on a side stream."""

    def __init__(
        self, device: str | torch.device, *, dtype: torch.dtype | None = None, keep: frozenset[str] = frozenset()
    ) -> None:
        self.device = torch.device(device)
        self.dtype = dtype
        #: keys the cast leaves alone (ragged keys and their offsets, as on the host)
        self.keep = keep
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device={str(device)!r} asked for, but CUDA is not available in this process "
                "(a CPU-only torch build, or no visible GPU); use device=None or 'cpu'"
            )
        self.stream: torch.cuda.Stream | None = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None

    @property
    def ahead(self) -> bool:
        """True when batches are issued one step ahead (CUDA)."""
        return self.stream is not None

    def issue(self, batch: object) -> object:
        """Start moving ``batch`` (returns what :meth:`ready` hands out later)."""
        if not isinstance(batch, dict):
            return batch
        if self.stream is None:
            moved = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            if all(isinstance(v, torch.Tensor) for v in moved.values()):
                return cast_integers(moved, self.dtype, self.keep)
            return moved
        out: dict[str, Any] = {}
        hosts = []  # pinned copies stay referenced until the copy is consumed
        with torch.cuda.stream(self.stream):
            for k, v in batch.items():
                if not isinstance(v, torch.Tensor):
                    out[k] = v
                    continue
                host = v if v.is_pinned() else v.pin_memory()
                hosts.append(host)
                t = host.to(self.device, non_blocking=True)
                if self.dtype is not None and is_integer(t.dtype) and k not in self.keep:
                    t = cast_tensor(k, t, self.dtype)  # on the device, on the side stream; never a changed value
                out[k] = t
        return out, hosts

    def ready(self, issued: object) -> object:
        """The batch of ``issued``, safe to use on the current (training) stream."""
        if self.stream is None or not isinstance(issued, tuple):
            return issued
        out, _hosts = issued
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        for v in out.values():
            if isinstance(v, torch.Tensor):
                v.record_stream(current)
        return out

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        """Every batch of ``batches`` on the device (on CUDA, the next one already in flight)."""
        for batch in batches:
            yield self.ready(self.issue(batch))
