"""Shards, the unit of work of a producer fleet: stable producer ids and their bookkeeping.

A fleet cuts its input into ``shard_count`` shards. Shard ``i`` is produced
by ``make_pipeline(i, shard_count)`` under the producer id
``f"{prefix}-shard{i:05d}-of{shard_count:05d}"``, whichever worker runs it
(the ids of a job of declared shards, :mod:`torch_tgb.manifest.jobs`: the
same shard run by ``tgb produce --shard`` is the same producer).
The id never depends on the number of workers, so workers may come and go:
a shard started again anywhere resumes at the offset and pipeline state its
last commit recorded (exactly-once, docs/protocol.md), and an older
incarnation still running somewhere is fenced by the epoch bump.

:class:`ShardBoard` is the driver's pure bookkeeping (no Ray): which shards
wait, which run where, which are done, and how often each was started.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torch_tgb.errors import FleetError
from torch_tgb.manifest.jobs import parse_shard_producer_id, shard_producer_id

__all__ = ["ShardBoard", "check_shard_count", "parse_shard_producer_id", "shard_producer_id"]


def check_shard_count(producer_ids: Iterable[str], *, prefix: str, count: int, where: str) -> None:
    """Refuse a shard count other than the one the namespace was produced with under ``prefix``.

    The shard -> producer id mapping is what makes restarts exactly-once; a
    different count would re-cut the input into other shards under new ids and
    produce every document again.
    """
    counts = sorted({parsed[2] for pid in producer_ids if (parsed := parse_shard_producer_id(pid)) and parsed[0] == prefix})
    others = [c for c in counts if c != count]
    if others:
        raise FleetError(
            f"{where}: producer prefix {prefix!r} was produced with num_shards={others[0]}, not {count}; "
            "the shard count of a namespace is fixed (pass num_shards="
            f"{others[0]}, or use another prefix for a new stream)"
        )


@dataclass
class _Shard:
    index: int
    producer_id: str
    state: str = "pending"  # pending | running | done
    attempts: int = 0
    worker: str | None = None
    group: int | None = None  # the source group it reads (a fleet planned by source), else None


class ShardBoard:
    """Pending, running and finished shards of one fleet run; pure and single-threaded."""

    def __init__(self, *, prefix: str, count: int, groups: Sequence[int] | None = None) -> None:
        if count < 1:
            raise ValueError(f"num_shards={count} must be >= 1")
        if groups is not None and len(groups) != count:
            raise ValueError(f"groups: one per shard ({count}), got {len(groups)}")
        self.count = count
        self._shards = [_Shard(i, shard_producer_id(prefix, i, count), group=None if groups is None else groups[i])
                        for i in range(count)]
        self._pending: deque[int] = deque(range(count))

    def producer_id(self, index: int) -> str:
        return self._shards[index].producer_id

    def claim(self, worker: str, group: int | None = None) -> int | None:
        """The next pending shard, now running on ``worker`` (``None`` if nothing waits).

        ``group``: a dedicated worker's source group, whose next pending shard
        it takes first; another group's when its own has none waiting (no
        actor idles while work waits).
        """
        if not self._pending:
            return None
        mine = next((i for i in self._pending if group is not None and self._shards[i].group == group), None)
        if mine is None:
            mine = self._pending[0]
        self._pending.remove(mine)
        shard = self._shards[mine]
        shard.state, shard.worker = "running", worker
        shard.attempts += 1
        return shard.index

    def requeue(self, index: int) -> None:
        """Put a running shard back in front of the queue (its worker died, was removed or hung)."""
        shard = self._shards[index]
        if shard.state != "running":
            raise ValueError(f"shard {index} ({shard.producer_id}) is {shard.state}, not running")
        shard.state, shard.worker = "pending", None
        self._pending.appendleft(index)

    def finish(self, index: int) -> None:
        shard = self._shards[index]
        shard.state, shard.worker = "done", None

    def group(self, index: int) -> int | None:
        return self._shards[index].group

    def runnable(self, groups: int) -> list[int]:
        """Per source group: its shards not done (pending or running)."""
        out = [0] * groups
        for s in self._shards:
            if s.group is not None and s.state != "done":
                out[s.group] += 1
        return out

    def attempts(self, index: int) -> int:
        return self._shards[index].attempts

    def state(self, index: int) -> str:
        return self._shards[index].state

    def worker(self, index: int) -> str | None:
        return self._shards[index].worker

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def running(self) -> int:
        return sum(1 for s in self._shards if s.state == "running")

    @property
    def done(self) -> int:
        return sum(1 for s in self._shards if s.state == "done")

    @property
    def all_done(self) -> bool:
        return all(s.state == "done" for s in self._shards)
