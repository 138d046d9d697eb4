"""``ProducerStats``: a frozen snapshot of a producer's counters (flat numeric fields)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProducerStats"]


@dataclass(frozen=True)
class ProducerStats:
    """Counters since the producer started; taken under the producer's lock.

    ``attempts`` counts version writes tried (``successes + conflicts``, plus
    reclaimed-slot failures); ``recognised`` how many successes were learnt by
    reading our commit token back after a lost acknowledgement.
    ``committed_steps`` is the namespace's step count in this producer's
    newest view; ``committed_offsets`` this producer's own ``next_offset``.
    ``fragile_window_s`` is an EMA (weight 0.2) of newest-read -> write-done;
    ``gap_s`` the policy's current waiting gap.
    """

    attempts: int = 0
    successes: int = 0
    conflicts: int = 0
    recognised: int = 0
    reclaimed_slots: int = 0
    fenced: int = 0
    epoch: int = 0
    committed_steps: int = 0
    committed_offsets: int = 0
    appended: int = 0
    skipped: int = 0
    pending: int = 0
    fragile_window_s: float = 0.0
    gap_s: float = 0.0
    active_producers: int = 1
    paused_for_lag: bool = False
    paused_for_lag_s: float = 0.0
    paused_for_backpressure_s: float = 0.0
    bytes_written: int = 0

    @property
    def success_rate(self) -> float:
        return self.successes / self.attempts if self.attempts else 1.0
