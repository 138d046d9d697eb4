"""Randomised exponential backoff after a conflict (used by the benchmarks' model of the registration in the log
that registration objects replaced, ``manifest/_epochs.py``).

Producers started together all try to write the same log slot; one wins,
and retrying at once makes every loser try the next slot together again:
N producers then cost O(N²) attempts (1,024: about 500k). Waiting
``U(0, min(cap, base·2^(k-1)))`` after the k-th conflict in a row ("full
jitter") spreads the losers' next attempts over a window that doubles until
it matches the contention, up to a cap: a larger cap, fewer attempts and a
longer tail after the contention is over (docs/benchmarks.md, section 8:
1,024 producers at 20 ms round trips make about 27 attempts each, not 470).

The log still takes one version per fragile window (about two round trips),
so N registrations take at least N × 2 round trips whatever the schedule:
backoff cuts the attempts, not that serial time.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

__all__ = ["Backoff", "backoff_delay"]


def backoff_delay(conflicts: int, u: float, *, base_s: float, cap_s: float) -> float:
    """Seconds to wait after the ``conflicts``-th conflict in a row: ``u · min(cap, base · 2^(conflicts-1))``.

    ``u`` is drawn from ``U(0, 1)``; ``conflicts = 0`` (no conflict yet) waits 0.
    """
    if conflicts < 0:
        raise ValueError(f"conflicts={conflicts} must be >= 0")
    if not 0.0 <= u <= 1.0:
        raise ValueError(f"u={u} must lie in [0, 1]")
    if not (0.0 <= base_s <= cap_s and math.isfinite(cap_s)):
        raise ValueError(f"backoff needs 0 <= base_s <= cap_s < inf, got base_s={base_s}, cap_s={cap_s}")
    if conflicts == 0:
        return 0.0
    window = min(cap_s, base_s * 2.0 ** min(conflicts - 1, 64))  # 2^64: past any cap, no overflow
    return u * window


@dataclass(frozen=True)
class Backoff:
    """A registration's backoff: after the k-th conflict in a row wait ``U(0, min(cap_s, base_s·2^(k-1)))``.

    ``base_s`` about one fragile window of a remote store (two 20 ms round
    trips); ``cap_s`` bounds one wait, and so the tail once contention is
    over (a larger cap: fewer attempts, a longer tail). ``Backoff(0, 0)`` retries at once.
    """

    base_s: float = 0.05
    cap_s: float = 2.0

    def __post_init__(self) -> None:
        backoff_delay(0, 0.0, base_s=self.base_s, cap_s=self.cap_s)  # validates

    def delay(self, conflicts: int, u: float) -> float:
        """Seconds to wait after ``conflicts`` conflicts in a row, for ``u`` drawn from ``U(0, 1)``."""
        return backoff_delay(conflicts, u, base_s=self.base_s, cap_s=self.cap_s)

    def wait(self, conflicts: int) -> None:
        """Sleep :meth:`delay` after the ``conflicts``-th conflict in a row (a fresh ``u`` each time)."""
        time.sleep(self.delay(conflicts, random.random()))
