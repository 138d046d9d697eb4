"""The actors of a fleet: starting, probing after a restart, replacing, scaling (``WorkerPool``)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ray import ObjectRef

    from torch_tgb.integrations._worker import WorkerSpec

__all__ = ["ActorClass", "RemoteMethod", "ShardActor", "Worker", "WorkerPool"]


class RemoteMethod(Protocol):
    """A method of an actor handle: ``.remote(...)`` sends the call and returns the reply's reference."""

    def remote(self, *args: object) -> ObjectRef[object]: ...


class ShardActor(Protocol):
    """The handle of a :class:`~torch_tgb.integrations._worker.ShardWorker` actor: the calls the driver makes."""

    @property
    def run_shard(self) -> RemoteMethod: ...

    @property
    def progress(self) -> RemoteMethod: ...

    @property
    def where(self) -> RemoteMethod: ...


class ActorClass(Protocol):
    """``ray.remote(ShardWorker).options(...)``: ``.remote(spec)`` starts an actor."""

    def remote(self, spec: WorkerSpec) -> ShardActor: ...

log = logging.getLogger("torch_tgb.integrations.ray")


@dataclass
class Worker:
    """One actor and what the driver knows of it; only the driver thread changes it."""

    name: str
    handle: ShardActor
    #: the source group it is dedicated to (claims that group's shards first); None: any shard
    group: int | None = None
    deaths: int = 0
    shard: int | None = None
    ref: ObjectRef[object] | None = None
    progress_ref: ObjectRef[object] | None = None
    probe_ref: ObjectRef[object] | None = None  # after a failure: a no-op call; the worker gets work once it answers
    probe_at: float = 0.0
    last_progress: tuple[float, ...] = ()
    last_change: float | None = None  # when its counters last moved; None until the attempt reports

    @property
    def ready(self) -> bool:
        """Idle and not waiting for a restart."""
        return self.shard is None and self.probe_ref is None and not self.probe_at


class WorkerPool:
    """The live actors of one fleet and the number wanted (``scale``); thread-safe where it says so.

    ``ray`` is the imported module, ``remote_cls`` the actor class with its
    options, ``spec`` what each actor is built with.
    """

    def __init__(
        self, ray: ModuleType, remote_cls: ActorClass, spec: WorkerSpec, *, prefix: str, target: int, retry_s: float,
    ) -> None:
        self._ray, self._remote_cls, self._spec = ray, remote_cls, spec
        self.prefix = prefix
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._target = target
        self._spawned = 0
        self.workers: list[Worker] = []
        self._labels: deque[int | None] = deque()  # the groups of the next actors started
        self._drop: list[int] = []  # groups whose busy actors go first when the pool shrinks

    # --- any thread -------------------------------------------------------------------

    def scale(self, target: int, *, groups: Sequence[int | None] = (), drop: Sequence[int] = ()) -> None:
        """Run ``target`` actors; the next ones started serve ``groups`` (in order, after those already
        waiting to start), and busy actors of the ``drop`` groups go first when it shrinks."""
        with self._lock:
            self._target = target
            self._labels.extend(groups)
            self._drop = list(drop)

    def assignments(self) -> list[tuple[str, int | None, int | None]]:
        """``(actor, its group, the shard it runs)`` of every live actor."""
        with self._lock:
            return [(w.name, w.group, w.shard) for w in self.workers]

    def groups(self) -> list[int | None]:
        """The group of every live actor, then of those waiting to start."""
        with self._lock:
            waiting = max(0, self._target - len(self.workers))
            return [w.group for w in self.workers] + [*self._labels, *[None] * waiting][:waiting]

    @property
    def target(self) -> int:
        with self._lock:
            return self._target

    def handles(self, *, running: bool = False) -> list[ShardActor]:
        with self._lock:
            return [w.handle for w in self.workers if w.shard is not None or not running]

    # --- the driver thread ------------------------------------------------------------

    def apply_scale(self) -> list[Worker]:
        """Start or kill actors to match the target; returns the killed ones that held a shard.

        Idle workers go first; a busy one's shard must be requeued by the
        caller (it resumes at its last commit).
        """
        victims: list[Worker] = []
        with self._lock:
            while len(self.workers) < self._target:
                self._spawned += 1
                group = self._labels.popleft() if self._labels else None
                self.workers.append(Worker(f"{self.prefix}-w{self._spawned}", self._remote_cls.remote(self._spec),
                                           group))
            self._labels.clear()
            surplus = len(self.workers) - self._target
            if surplus > 0:  # idle ones first; then undedicated, then by the drop order
                rank = {g: i for i, g in enumerate(self._drop)}
                victims = sorted(self.workers, key=lambda w: (w.shard is not None,
                                                              -1 if w.group is None else rank.get(w.group, len(rank))))
                victims = victims[:surplus]
                self.workers = [w for w in self.workers if w not in victims]
        for w in victims:
            self.kill(w)
        return [w for w in victims if w.shard is not None]

    def kill(self, worker: Worker) -> None:
        try:
            self._ray.kill(worker.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def remove(self, worker: Worker) -> None:
        """Take ``worker`` out of the pool (``apply_scale`` starts another, for the same group); it is not killed."""
        with self._lock:
            if worker in self.workers:
                self.workers.remove(worker)
                self._labels.appendleft(worker.group)

    def replace(self, worker: Worker) -> None:
        """Drop a worker Ray will not bring back, and kill it."""
        self.remove(worker)
        self.kill(worker)

    def probe_later(self, worker: Worker) -> None:
        """Ray restarts it; calls sent meanwhile fail (``ActorUnavailableError``): probe before new work."""
        worker.probe_at = time.monotonic()

    def send_probes(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            if w.probe_ref is None and w.probe_at and now >= w.probe_at:
                w.probe_ref, w.probe_at = w.handle.where.remote(), 0.0

    def probes(self) -> dict[ObjectRef[object], Worker]:
        return {w.probe_ref: w for w in self.workers if w.probe_ref is not None}

    def probed(self, worker: Worker) -> None:
        """The probe of ``worker`` answered: ready, still restarting (probe again), or gone (replace)."""
        try:
            self._ray.get(worker.probe_ref)
            worker.probe_ref = None
        except self._ray.exceptions.ActorUnavailableError:  # still restarting
            worker.probe_ref, worker.probe_at = None, time.monotonic() + self.retry_s
        except self._ray.exceptions.RayError as e:
            log.warning("fleet %s: worker %s is gone (%s); starting another", self.prefix, worker.name,
                        type(e).__name__)
            self.replace(worker)
