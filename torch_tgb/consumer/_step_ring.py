"""A ring of shared-memory slots per DataLoader worker: steps handed over without a descriptor per step.

A step packed into its own shared-memory buffer (:func:`~torch_tgb.consumer._shared_step.pack_step`)
still costs the main process one file descriptor per step: torch hands a shared
storage over by connecting to the worker's resource sharer, authenticating and
receiving the descriptor, then mapping it (measured: 2-4 ms per step on a 2-core
VM, ~66% of the main process's time at 32x512 int64 in issue 43).

Here each worker keeps a ring of ``slots`` shared buffers (its own, made on
first use and grown when a step outgrows one). A step is written into the next
slot and travels as a :class:`RingStep`: the slot's storage only the first time
that slot (or a grown buffer) is handed over, afterwards only the ring's token
and the slot's number. The main process maps each slot once
(:data:`_MAPPED`) and, as it unpickles a step, copies it out of the slot into
memory of its own (one copy of the step's bytes, ~20 µs for 256 KB): the slot
is free again before the step reaches the training loop, and the tensors the
loop keeps are never overwritten.

Why ``slots = prefetch_factor * num_workers + 1`` is enough: the loader never
has more than ``prefetch_factor * num_workers`` steps asked of its workers and
not yet received, it asks for the next step only after it received one, and a
step is copied out as it is received (unpickled); so when a worker writes its
step ``j`` into slot ``j % slots``, its step ``j - slots`` has been copied out.
(A queue's own bound would not do: ``multiprocessing.Queue.get`` frees its
place before it unpickles.)

A ring belongs to one worker process; rings of workers that have exited are
dropped from :data:`_MAPPED` when a new ring first hands a slot over.
"""

from __future__ import annotations

import os
import secrets
import threading
from typing import Any

import torch

from torch_tgb.consumer._shared_step import SharedStep, Specs, packable, shared_bytes, step_specs, write_step
from torch_tgb.errors import FrameworkError

__all__ = ["RingStep", "ring_slots", "send_step"]

#: main process: (worker pid, ring token) -> slot number -> the slot's bytes, mapped once
_MAPPED: dict[tuple[int, int], dict[int, torch.Tensor]] = {}
_MAPPED_LOCK = threading.Lock()


def ring_slots(*, num_workers: int, prefetch_factor: int) -> int:
    """Slots per worker so that a slot is never written while the main process has yet to copy it out."""
    return prefetch_factor * num_workers + 1


class _Ring:
    """A worker's slots (made on first use), the next one to write, and the token the main process knows it by."""

    def __init__(self, slots: int) -> None:
        self.pid = os.getpid()
        self.token = secrets.randbits(63)
        self.buffers: list[torch.Tensor | None] = [None] * slots
        self.next = 0


_RING: _Ring | None = None  # this worker process's ring


def send_step(step: object, *, slots: int) -> object:
    """In a worker: ``step`` written into the next slot of this process's ring, as a :class:`RingStep`.

    What :func:`~torch_tgb.consumer._shared_step.packable` refuses passes through unchanged.
    """
    global _RING
    if not packable(step):
        return step
    ring = _RING
    if ring is None or ring.pid != os.getpid() or len(ring.buffers) != slots:  # a forked child has a ring of its own
        ring = _RING = _Ring(slots)
    specs, nbytes = step_specs(step)  # type: ignore[arg-type]  # packable: a dict of tensors
    slot = ring.next
    ring.next = (slot + 1) % slots
    buffer = ring.buffers[slot]
    fresh = buffer is None or buffer.numel() < nbytes
    if fresh:
        buffer = ring.buffers[slot] = shared_bytes(max(nbytes, 1))
    assert buffer is not None
    write_step(buffer, step, specs)  # type: ignore[arg-type]
    return RingStep(ring.pid, ring.token, slot, buffer if fresh else None, specs, nbytes)


class RingStep:
    """A step in slot ``slot`` of a worker's ring (``buffer``: the slot's bytes, only on their first handover).

    Unpickled in the main process, it becomes a :class:`SharedStep` over a copy of the slot's bytes.
    """

    __slots__ = ("buffer", "nbytes", "pid", "slot", "specs", "token")

    def __init__(self, pid: int, token: int, slot: int, buffer: torch.Tensor | None, specs: Specs,
                 nbytes: int) -> None:
        self.pid, self.token, self.slot = pid, token, slot
        self.buffer, self.specs, self.nbytes = buffer, specs, nbytes

    def __reduce__(self) -> tuple[Any, ...]:
        return receive_step, (self.pid, self.token, self.slot, self.buffer, self.specs, self.nbytes)


def receive_step(pid: int, token: int, slot: int, buffer: torch.Tensor | None, specs: Specs,
                 nbytes: int) -> SharedStep:
    """In the main process: the step of ``slot``, copied out of it (the slot's bytes kept mapped for next time)."""
    key = (pid, token)
    with _MAPPED_LOCK:
        ring = _MAPPED.get(key)
        if ring is None:
            _forget_exited_rings()
            ring = _MAPPED[key] = {}
        if buffer is not None:
            ring[slot] = buffer
        else:
            buffer = ring.get(slot)
    if buffer is None:
        raise FrameworkError(
            f"tgb.DataLoader: worker pid={pid} handed over slot {slot} of a step ring this process never mapped "
            "(a RingStep unpickled outside the loader's main process?): read with num_workers=0 to go on"
        )
    out = torch.empty(nbytes, dtype=torch.uint8)
    out.copy_(buffer[:nbytes])
    return SharedStep(out, specs)


def _forget_exited_rings() -> None:
    """Drop the mapped slots of rings whose worker has exited (the caller holds the lock)."""
    for key in [k for k in _MAPPED if not _alive(k[0])]:
        del _MAPPED[key]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
