"""Batched range reads with an error budget (GetBatch's client side, seed 003).

:func:`fetch_ranges` reads many ranges with one ordered ``get_ranges`` call
(``continue_on_error``: a failed range is a placeholder at its position, the
others are kept). Each failure is classified:

* **soft** — the object is missing (:class:`ObjectNotFound`: a lagging
  replica, a listing not yet consistent) or the store failed transiently
  (:class:`TransientStorageError`: timeouts, 5xx, throttling). Soft failures
  are re-read together, in one batched call per attempt, up to
  ``ErrorBudget.attempts`` times;
* **hard** — anything else (permission denied, an invalid key, a corrupt
  object): raised at once.

A call tolerates at most ``ErrorBudget.soft_limit`` soft failures in all;
beyond that (or once the attempts are spent) the first remaining failure is
raised, naming the budget. A TGB step cannot be skipped, so the budget bounds
retries rather than dropping data. Counters ``soft_errors``, ``hard_errors``
and ``retries`` go to the pipeline's :class:`ReadStats` (and from there to
``ConsumerStats`` and Prometheus).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from torch_tgb.datapipes.read.stats import ReadStats
from torch_tgb.errors import CorruptObject, ObjectNotFound, TGBError, TransientStorageError
from torch_tgb.storage import CachingStore, ObjectStore, RangeFailure, RangeRequest

__all__ = ["ErrorBudget", "fetch_ranges", "is_soft", "refetch_if_cached"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class ErrorBudget:
    """How many soft read failures one batched call absorbs, and how it retries them."""

    #: soft failures tolerated per call (over all its attempts) before it fails
    soft_limit: int = 16
    #: batched re-reads of the failed ranges after the first call
    attempts: int = 3
    #: pause before re-read ``i`` (1-based): ``backoff_s * 2 ** (i - 1)``
    backoff_s: float = 0.05

    def __post_init__(self) -> None:
        if self.soft_limit < 0 or self.attempts < 0 or self.backoff_s < 0:
            raise ValueError(f"ErrorBudget fields must be >= 0, got {self}")


def is_soft(error: BaseException) -> bool:
    """A failure worth re-reading: a missing object or a transient store error."""
    return isinstance(error, (ObjectNotFound, TransientStorageError))


def fetch_ranges(
    store: ObjectStore,
    requests: Sequence[RangeRequest],
    *,
    budget: ErrorBudget = ErrorBudget(),
    stats: ReadStats | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[bytes]:
    """The bytes of every request, in request order; see the module docstring for failures."""
    results: list[bytes | RangeFailure] = list(store.get_ranges(requests, continue_on_error=True))
    soft_seen = 0
    attempt = 0
    while True:
        failed = [i for i, r in enumerate(results) if isinstance(r, RangeFailure)]
        if not failed:
            return results  # type: ignore[return-value]  # no placeholder left
        failures = [results[i] for i in failed]
        hard = [f for f in failures if isinstance(f, RangeFailure) and not is_soft(f.error)]
        if hard:
            if stats is not None:
                stats.add(hard_errors=len(hard))
            raise hard[0].error
        soft_seen += len(failed)
        if stats is not None:
            stats.add(soft_errors=len(failed))
        first = failures[0]
        assert isinstance(first, RangeFailure)
        if soft_seen > budget.soft_limit or attempt >= budget.attempts:
            why = (f"{soft_seen} soft failures exceed the budget of {budget.soft_limit}"
                   if soft_seen > budget.soft_limit else f"still failing after {attempt} re-reads")
            raise _budget_error(first.error, why)
        attempt += 1
        if budget.backoff_s:
            sleep(budget.backoff_s * 2 ** (attempt - 1))
        if stats is not None:
            stats.add(retries=len(failed))
        again = store.get_ranges([requests[i] for i in failed], continue_on_error=True)
        for i, r in zip(failed, again):
            results[i] = r


def _budget_error(error: TGBError, why: str) -> TGBError:
    """``error`` again (same type, so callers' handling holds), its message saying the budget ran out."""
    try:
        out = type(error)(f"{error} ({why})")
    except TypeError:  # an exception type with another constructor: keep it as it is
        return error
    out.__cause__ = error
    return out


def refetch_if_cached(store: ObjectStore, keys: Iterable[str], attempt: Callable[[], _T], stats: ReadStats) -> _T:
    """``attempt()`` (fetch and check some ranges of ``keys``); once more from the origin if cached bytes were corrupt.

    A hot tier (:class:`~torch_tgb.storage.CachingStore`) keeps what it
    fetched, so bytes corrupted on their way in would fail every later read on
    the node. On :class:`CorruptObject` the cached copies of ``keys`` are
    dropped and the ranges read again, once; bytes still corrupt at the origin
    raise. A store that caches nothing raises at once.
    """
    try:
        return attempt()
    except CorruptObject:
        if not isinstance(store, CachingStore):
            raise
        store.forget(list(keys))
        stats.add(retries=1)
        return attempt()
