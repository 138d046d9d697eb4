"""Retries with exponential backoff and jitter around any :class:`ObjectStore`.

Only :class:`TransientStorageError` is retried (timeouts, 5xx, throttling,
409); permanent errors (missing key, access denied, bad key, full disk) pass
through at once. Retrying is safe because every operation is idempotent
except ``put_if_absent``, whose retry after an :class:`AmbiguousWriteError`
is handled explicitly: the first attempt may have landed without us hearing
(a lost acknowledgement), so a later ``False`` is checked by reading the key
back; if it holds exactly our bytes the write is reported as ours (``True``).
Callers whose payloads are unique (the manifest's commit tokens) thereby
learn the truth; for identical payloads from two writers either answer is
harmless because the stored object is the same.
"""

from __future__ import annotations

import builtins
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from torch_tgb.errors import AmbiguousWriteError, ObjectNotFound, TransientStorageError
from torch_tgb.storage._base import Buffer, ObjectInfo, ObjectStore, RangeFailure, RangeRequest
from torch_tgb.storage._wrapper import StoreWrapper
from torch_tgb.storage._writer import ObjectWriter

__all__ = ["RetryPolicy", "RetryingStore"]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a transient failure.

    ``attempts`` counts the first try (1 = no retry). The n-th retry waits
    ``min(max_delay, base_delay * 2**(n-1))`` scaled by a random factor in
    ``[1 - jitter, 1]`` (``jitter=1`` is "full jitter").
    """

    attempts: int = 5
    base_delay: float = 0.05
    max_delay: float = 2.0
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError(f"RetryPolicy delays must be >= 0, got {self.base_delay}, {self.max_delay}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"RetryPolicy.jitter must be in [0, 1], got {self.jitter}")

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** (retry - 1)))
        return float(ceiling * (1.0 - self.jitter * rng.random()))


class RetryingStore(StoreWrapper):
    """Wraps ``inner``; transient failures are retried per ``policy``.

    ``sleep`` and ``seed`` exist for tests (no real waiting, reproducible
    jitter). ``retries`` counts retries made, for tests and stats.
    """

    def __init__(
        self,
        inner: ObjectStore,
        policy: RetryPolicy | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        seed: int | None = None,
    ) -> None:
        super().__init__(inner)
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._rng = random.Random(seed)
        self.retries = 0

    @property
    def max_in_flight(self) -> int:  # type: ignore[override]
        return self.inner.max_in_flight

    def _backoff(self, retry: int) -> None:
        with self._lock:
            delay = self.policy.delay(retry, self._rng)
            self.retries += 1
        self._sleep(delay)

    def _call(self, fn: Callable[[], T]) -> T:
        attempts = self.policy.attempts
        for attempt in range(1, attempts + 1):
            try:
                return fn()
            except TransientStorageError as e:
                if attempt == attempts:
                    if attempts == 1:
                        raise
                    raise _exhausted(e, attempts) from e
                self._backoff(attempt)
        raise AssertionError("unreachable")  # the loop returns or raises

    # --- reads -----------------------------------------------------------------

    def get(self, key: str) -> bytes:
        return self._call(lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._call(lambda: self.inner.get_range(key, start, end))

    def stat(self, key: str) -> ObjectInfo:
        return self._call(lambda: self.inner.stat(key))

    def size(self, key: str) -> int:
        return self._call(lambda: self.inner.size(key))

    def exists(self, key: str) -> bool:
        return self._call(lambda: self.inner.exists(key))

    def list(self, prefix: str = "") -> list[str]:
        return self._call(lambda: self.inner.list(prefix))

    def local_path(self, key: str) -> str | None:
        return self.inner.local_path(key)

    def open_writer(self, key: str, *, size_hint: int = 0) -> ObjectWriter:
        # written in place by the inner store (a local file: nothing to retry), else gathered and
        # published with this store's put, retries included
        if self.inner.writes_in_place:
            return self.inner.open_writer(key, size_hint=size_hint)
        return super().open_writer(key, size_hint=size_hint)

    def get_ranges(
        self, requests: Sequence[RangeRequest], *, continue_on_error: bool = False
    ) -> builtins.list[bytes | RangeFailure]:
        """Delegates to the inner store's (possibly batched) ``get_ranges``;
        transiently failed entries are re-issued together, up to ``attempts``."""
        results: list[bytes | RangeFailure] = list(
            self.inner.get_ranges(requests, continue_on_error=True)
        )
        for attempt in range(1, self.policy.attempts):
            pending = [
                i
                for i, r in enumerate(results)
                if isinstance(r, RangeFailure) and isinstance(r.error, TransientStorageError)
            ]
            if not pending:
                break
            self._backoff(attempt)
            again = self.inner.get_ranges([requests[i] for i in pending], continue_on_error=True)
            for i, r in zip(pending, again):
                results[i] = r
        if self.policy.attempts > 1:
            # Still transient after the last round: say that retries ran out, as every other operation does.
            results = [
                RangeFailure(r.request, _exhausted(r.error, self.policy.attempts))
                if isinstance(r, RangeFailure) and isinstance(r.error, TransientStorageError)
                else r
                for r in results
            ]
        if not continue_on_error:
            for r in results:
                if isinstance(r, RangeFailure):
                    raise r.error
        return results

    # --- writes ----------------------------------------------------------------

    def put(self, key: str, data: Buffer) -> None:
        self._call(lambda: self.inner.put(key, data))  # idempotent: a replay writes the same bytes

    def put_if_absent(self, key: str, data: Buffer) -> bool:
        attempts = self.policy.attempts
        ambiguous = False  # an earlier attempt may have landed unseen
        for attempt in range(1, attempts + 1):
            try:
                created = self.inner.put_if_absent(key, data)
            except TransientStorageError as e:
                ambiguous = ambiguous or isinstance(e, AmbiguousWriteError)
                if attempt == attempts:
                    if attempts == 1:
                        raise
                    raise _exhausted(e, attempts) from e
                self._backoff(attempt)
                continue
            if created or not ambiguous:
                return created
            return self._was_ours(key, data)
        raise AssertionError("unreachable")

    def _was_ours(self, key: str, data: Buffer) -> bool:
        """After a lost acknowledgement: does ``key`` hold exactly our bytes?"""
        expected = memoryview(data).cast("B")
        try:
            if self.size(key) != expected.nbytes:
                return False  # cheap: a different size cannot be our object
            stored = self.get(key)
        except ObjectNotFound:
            return False  # deleted meanwhile: it was someone else's to delete
        return stored == expected

    def delete(self, keys: str | Iterable[str]) -> None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        self._call(lambda: self.inner.delete(keys))

    def __repr__(self) -> str:
        return f"RetryingStore({self.inner!r})"


def _exhausted(error: TransientStorageError, attempts: int) -> TransientStorageError:
    """The same error class, its message saying that retries ran out."""
    try:
        return type(error)(f"{error} (gave up after {attempts} attempts)")
    except TypeError:  # an exotic subclass constructor
        return TransientStorageError(f"{error} (gave up after {attempts} attempts)")
