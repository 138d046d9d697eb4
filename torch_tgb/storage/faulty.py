"""``FaultyStore``: deterministic fault injection around any store (tests, benchmarks).

Each call of an operation draws its fate from a random generator seeded by
``(plan.seed, operation, call number)``, so a run is reproducible even when
threads interleave different operations. Fault kinds:

===========  ====================================================================
``error``    a transient failure (503 SlowDown) before the store is touched
``timeout``  no reply, before the store applied anything; for writes this is
             an :class:`AmbiguousWriteError` whose write did *not* land
``lost_ack`` writes only: the store applied the write, then the reply is
             lost: :class:`AmbiguousWriteError` although the write landed
``enospc``   puts only: the disk is full (:class:`StorageFull`), nothing written
``slow``     the call sleeps ``FaultRates.delay`` seconds, then proceeds
===========  ====================================================================

Faults are raised as the raw exceptions a backend would raise (``TimeoutError``,
``OSError(ENOSPC)``...) passed through the one translation table, so the
mapping is exercised too. ``fail_next(op, n, kind)`` forces exact faults for
precise tests; ``count(...)`` tells how many fired. ``local_path`` is always
``None`` so reads cannot bypass the faults through mmap.
"""

from __future__ import annotations

import errno
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar
from dataclasses import dataclass, field

from torch_tgb.storage._base import Buffer, ObjectInfo, ObjectStore
from torch_tgb.storage._errors import translate
from torch_tgb.storage._wrapper import StoreWrapper

_T = TypeVar("_T")

__all__ = ["FAULT_KINDS", "OPERATIONS", "FaultPlan", "FaultRates", "FaultyStore"]

OPERATIONS = ("get", "get_range", "stat", "exists", "list", "put", "put_if_absent", "delete")
WRITES = frozenset({"put", "put_if_absent", "delete"})
PUTS = frozenset({"put", "put_if_absent"})
FAULT_KINDS = ("error", "timeout", "lost_ack", "enospc", "slow")


@dataclass(frozen=True)
class FaultRates:
    """Probability of each fault kind per call (checked in this order)."""

    error: float = 0.0
    timeout: float = 0.0
    lost_ack: float = 0.0
    enospc: float = 0.0
    slow: float = 0.0
    delay: float = 0.05  # seconds a "slow" call sleeps

    def __post_init__(self) -> None:
        for kind in FAULT_KINDS:
            rate = getattr(self, kind)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"FaultRates.{kind} must be in [0, 1], got {rate}")
        if self.delay < 0:
            raise ValueError(f"FaultRates.delay must be >= 0, got {self.delay}")


@dataclass(frozen=True)
class FaultPlan:
    """Which faults to inject: ``default`` rates, overridden per operation in ``ops``."""

    seed: int = 0
    default: FaultRates = FaultRates()
    ops: Mapping[str, FaultRates] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.ops) - set(OPERATIONS))
        if unknown:
            raise ValueError(f"FaultPlan.ops: unknown operations {unknown}; known: {OPERATIONS}")
        object.__setattr__(self, "ops", dict(self.ops))  # a private copy (picklable, unlike a proxy)

    def rates(self, op: str) -> FaultRates:
        return self.ops.get(op, self.default)


class FaultyStore(StoreWrapper):
    """Wraps ``inner`` and injects the faults of ``plan``."""

    def __init__(self, inner: ObjectStore, plan: FaultPlan | None = None) -> None:
        super().__init__(inner)
        self.plan = plan or FaultPlan()
        self.max_in_flight = inner.max_in_flight
        self._calls: Counter[str] = Counter()
        self._forced: dict[str, deque[str]] = {}
        self.injected: Counter[tuple[str, str]] = Counter()

    # --- configuration and accounting -----------------------------------------

    def fail_next(self, op: str, n: int = 1, kind: str = "error") -> None:
        """Make the next ``n`` calls of ``op`` suffer ``kind`` (before any random fault)."""
        if op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r}; known: {OPERATIONS}")
        _check_kind(op, kind)
        with self._lock:
            self._forced.setdefault(op, deque()).extend([kind] * n)

    def count(self, op: str | None = None, kind: str | None = None) -> int:
        """How many faults fired, optionally only of one operation and/or kind."""
        with self._lock:
            return sum(
                n for (o, k), n in self.injected.items() if (op is None or o == op) and (kind is None or k == kind)
            )

    def _fate(self, op: str) -> str | None:
        with self._lock:
            call = self._calls[op]
            self._calls[op] += 1
            forced = self._forced.get(op)
            if forced:
                kind: str | None = forced.popleft()
            else:
                kind = self._draw(op, call)
            if kind is not None:
                self.injected[(op, kind)] += 1
            return kind

    def _draw(self, op: str, call: int) -> str | None:
        rates = self.plan.rates(op)
        rng = random.Random(f"{self.plan.seed}:{op}:{call}")
        for kind in FAULT_KINDS:
            rate = getattr(rates, kind)
            if kind == "lost_ack" and op not in WRITES or kind == "enospc" and op not in PUTS:
                continue
            if rate and rng.random() < rate:
                return kind
        return None

    # --- the fault machinery ----------------------------------------------------

    def _run(self, op: str, key: str | None, fn: Callable[..., _T], *args: object) -> _T:
        kind = self._fate(op)
        write = op in WRITES
        if kind == "slow":
            time.sleep(self.plan.rates(op).delay)
        elif kind == "error":
            raise translate(OSError(errno.EBUSY, "injected fault: 503 SlowDown"), url=self.url, op=op, key=key)
        elif kind == "timeout":
            raise translate(TimeoutError("injected fault: no reply"), url=self.url, op=op, key=key, write_sent=write)
        elif kind == "enospc":
            raise translate(OSError(errno.ENOSPC, "injected fault: no space left"), url=self.url, op=op, key=key)
        result = fn(*args)
        if kind == "lost_ack":  # the write landed; its acknowledgement did not
            raise translate(
                TimeoutError("injected fault: reply lost after the write was applied"),
                url=self.url,
                op=op,
                key=key,
                write_sent=True,
            )
        return result

    # --- ObjectStore ---------------------------------------------------------------

    def get(self, key: str) -> bytes:
        return self._run("get", key, self.inner.get, key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._run("get_range", key, self.inner.get_range, key, start, end)

    def stat(self, key: str) -> ObjectInfo:
        return self._run("stat", key, self.inner.stat, key)

    def exists(self, key: str) -> bool:
        return self._run("exists", key, self.inner.exists, key)

    def list(self, prefix: str = "") -> list[str]:
        return self._run("list", prefix, self.inner.list, prefix)

    def put(self, key: str, data: Buffer) -> None:
        self._run("put", key, self.inner.put, key, data)

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        return self._run("put_if_absent", key, self.inner.put_if_absent, key, data)

    def delete(self, keys: str | Iterable[str]) -> None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        self._run("delete", keys[0] if len(keys) == 1 else None, self.inner.delete, keys)

    def local_path(self, key: str) -> str | None:
        return None  # force reads through the faulty path

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r}, seed={self.plan.seed})"


def _check_kind(op: str, kind: str) -> None:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; known: {FAULT_KINDS}")
    if kind == "lost_ack" and op not in WRITES:
        raise ValueError(f"fault 'lost_ack' applies to writes {sorted(WRITES)}, not {op!r}")
    if kind == "enospc" and op not in PUTS:
        raise ValueError(f"fault 'enospc' applies to {sorted(PUTS)}, not {op!r}")
