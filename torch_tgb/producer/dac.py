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

and DAC waits ``g* = max(0, g_c, g_d)`` scaled by a jitter ``1 + U(-j, j)``.
"""

from __future__ import annotations

import math

__all__ = [
    "commit_duty",
    "conflict_gap",
    "conflict_probability",
    "duty_gap",
    "ema",
    "jittered",
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


def ema(previous: float | None, sample: float, weight: float) -> float:
    """Exponential moving average; the first sample initialises it."""
    if not 0.0 < weight <= 1.0:
        raise ValueError(f"EMA weight={weight} must lie in (0, 1]")
    return sample if previous is None else (1.0 - weight) * previous + weight * sample
