"""DAC (Decentralized Adaptive Commit) as pure functions.

Model (BatchWeave §5.2, DESIGN.md): a commit attempt is *fragile* for ``W``
seconds (newest version read -> write finished); after each attempt a
producer waits a gap ``g``. The other ``N - 1`` producers' attempts arrive as
a Poisson process of rate ``λ = (N-1)/(W+g)``, so

- conflict probability ``P(g) = 1 - exp(-λ W)``,
- commit duty ``D(g) = W / (W + g)`` (share of time spent in manifest I/O).

Budgets ``P <= ε_c`` and ``D <= ε_d`` give the smallest feasible gaps

- ``g_c = (N-1) W / (-ln(1-ε_c)) - W``,
- ``g_d = W (1-ε_d) / ε_d``,

and DAC waits ``g* = max(0, g_c, g_d)``, capped (:func:`gap_cap`) and only then
scaled by a jitter ``1 + U(-j, j)`` (:func:`next_gap`): a gap capped after
the jitter is the same for every producer at the cap, and producers that
started together then stay in phase and conflict in bursts. The cap grows
with ``N - 1`` as ``g_c`` does, so it binds at the same window at every N;
a ceiling (the producer's ``max_commit_delay_s``) bounds it, jitter included.
A producer's first gap is a uniform share of its gap (:func:`first_gap`),
which spreads producers started together over the cycle at once.
"""

from __future__ import annotations

import math

__all__ = [
    "commit_duty",
    "conflict_gap",
    "conflict_probability",
    "duty_gap",
    "ema",
    "first_gap",
    "gap_cap",
    "jittered",
    "next_gap",
    "optimal_gap",
]


def _check_budget(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name}={value} must lie strictly between 0 and 1")


def _check_window(window: float) -> None:
    if not (window >= 0.0 and math.isfinite(window)):
        raise ValueError(f"fragile window {window!r} must be a finite number >= 0")


def conflict_probability(window: float, gap: float, producers: int) -> float:
    """``P = 1 - exp(-(N-1) W / (W + g))``: chance another producer commits inside our window."""
    _check_window(window)
    if producers <= 1 or window == 0.0:
        return 0.0
    rate = (producers - 1) / (window + max(0.0, gap))
    return 1.0 - math.exp(-rate * window)


def commit_duty(window: float, gap: float) -> float:
    """``D = W / (W + g)``: the share of a cycle spent in the fragile window."""
    _check_window(window)
    cycle = window + max(0.0, gap)
    return 0.0 if cycle == 0.0 else window / cycle


def conflict_gap(window: float, producers: int, epsilon_c: float) -> float:
    """Smallest gap with ``P <= ε_c`` (may be negative: the budget holds at any gap)."""
    _check_window(window)
    _check_budget("epsilon_c", epsilon_c)
    if producers <= 1:
        return -window
    return (producers - 1) * window / -math.log1p(-epsilon_c) - window


def duty_gap(window: float, epsilon_d: float) -> float:
    """Smallest gap with ``D <= ε_d``."""
    _check_window(window)
    _check_budget("epsilon_d", epsilon_d)
    return window * (1.0 - epsilon_d) / epsilon_d


def optimal_gap(window: float, producers: int, *, epsilon_c: float = 0.05, epsilon_d: float = 0.1) -> float:
    """``g* = max(0, g_c, g_d)``: the smallest gap that meets both budgets."""
    return max(0.0, conflict_gap(window, producers, epsilon_c), duty_gap(window, epsilon_d))


def jittered(gap: float, jitter: float, u: float) -> float:
    """``g (1 + u)`` for ``u`` drawn from ``U(-jitter, jitter)``; never negative."""
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter={jitter} must lie in [0, 1)")
    if abs(u) > jitter:
        raise ValueError(f"u={u} lies outside [-{jitter}, {jitter}]")
    return max(0.0, gap * (1.0 + u))


def gap_cap(max_gap_s: float, producers: int, *, reference_producers: int) -> float:
    """The longest gap DAC waits among ``producers``: ``max_gap_s`` up to ``reference_producers``, then ∝ ``N - 1``.

    ``g_c`` grows as ``N - 1``, so a cap that does not would bind at ever
    smaller windows as N grows, and the conflict rate at the cap,
    ``1 - exp(-(N-1) W / cap)``, would grow with N (64 producers at 30 s and
    W = 40 ms: 8 %; 1,024: 75 %). Scaled, the cap binds at the same fragile
    window at every N: it only stops a burst of slow writes from stalling a producer.
    """
    if not (max_gap_s > 0.0 and math.isfinite(max_gap_s)):
        raise ValueError(f"max_gap_s={max_gap_s!r} must be a finite number > 0")
    if reference_producers < 2:
        raise ValueError(f"reference_producers={reference_producers} must be >= 2")
    return max_gap_s * max(1.0, (producers - 1) / (reference_producers - 1))


def next_gap(target: float, cap: float, jitter: float, u: float, *, ceiling: float = math.inf) -> float:
    """``min(target, cap, ceiling / (1 + jitter)) (1 + u)``: jittered *after* the caps, never above ``ceiling``.

    Gaps at the cap differ too, so producers drift apart; ``ceiling`` bounds
    the gap jitter included (the commit loop's ``max_commit_delay_s``, past
    which it would commit anyway, unjittered, every producer at the same age
    of its oldest entry).
    """
    if not ceiling > 0.0:
        raise ValueError(f"ceiling={ceiling!r} must be > 0")
    return jittered(min(target, cap, ceiling / (1.0 + jitter)), jitter, u)


def first_gap(gap: float, phase: float) -> float:
    """``gap * phase`` for ``phase`` drawn from ``U(0, 1)``: a producer's first gap, a random phase of its cycle.

    Producers started together make their first attempt together; a uniform
    first gap spreads their next attempts over the whole cycle at once,
    where the jitter alone would take many cycles to.
    """
    if not 0.0 <= phase <= 1.0:
        raise ValueError(f"phase={phase} must lie in [0, 1]")
    return max(0.0, gap) * phase


def ema(previous: float | None, sample: float, weight: float) -> float:
    """Exponential moving average; the first sample initialises it."""
    if not 0.0 < weight <= 1.0:
        raise ValueError(f"EMA weight={weight} must lie in (0, 1]")
    return sample if previous is None else (1.0 - weight) * previous + weight * sample
