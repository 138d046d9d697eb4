"""Mixture weights over the producer's global step, and the deterministic draw of a source.

A schedule maps a step (an int >= 0) to a ``{source name: weight}`` dict.
Weights need not sum to 1; a draw picks a source with probability
``weight / sum(weights)``. Any callable ``step -> dict`` is a schedule; the
helpers here are frozen dataclasses, so they have a readable repr and pickle:

- :func:`constant` ``({"web": 0.7, "code": 0.3})``;
- :func:`piecewise` ``(boundaries=[1000], weights=[w0, w1])``: ``w0`` for
  steps ``< 1000``, ``w1`` from step 1000 on;
- :func:`linear` ``(start, end, steps)``: from ``start`` at step 0 to ``end``
  at ``steps``, constant after (a name missing on one side weighs 0 there).

:func:`draw_source` is a pure function of ``(weights, seed, step, draw)``:
a counter-based hash (splitmix64) of the three integers gives a uniform
number, so the source of any document can be recomputed without replaying
the stream, on any machine (no global RNG, no platform-dependent generator).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from torch_tgb.errors import MixtureError

__all__ = [
    "Constant",
    "Linear",
    "Piecewise",
    "Schedule",
    "WeightsLike",
    "as_schedule",
    "check_weights",
    "constant",
    "draw_source",
    "linear",
    "parse_weights",
    "piecewise",
    "uniform",
]

#: a schedule: global step -> weights by source name
Schedule = Callable[[int], Mapping[str, float]]
#: what ``Mix(weights=...)`` accepts: constant weights or a schedule
WeightsLike = Mapping[str, float] | Schedule

_MASK64 = (1 << 64) - 1


def check_weights(
    weights: Mapping[str, float], names: Iterable[str] | None = None, *, step: int | None = None
) -> dict[str, float]:
    """Validated weights as a plain dict: finite, >= 0, not all 0, a finite sum, every name known.

    ``names`` (the sources that exist), when given: a weight for another name
    is an error; names without a weight get 0. ``step`` only goes into messages.
    """
    at = f" at {step=}" if step is not None else ""
    if not isinstance(weights, Mapping):
        raise MixtureError(f"mixture weights{at} must be a mapping name -> weight, got {type(weights).__name__}")
    out: dict[str, float] = {}
    for name, w in weights.items():
        try:
            value = float(w)
        except (TypeError, ValueError) as e:
            raise MixtureError(f"mixture weight of {name!r}{at} is not a number: {w!r}") from e
        if not math.isfinite(value) or value < 0:
            raise MixtureError(f"mixture weight of {name!r}{at} must be finite and >= 0, got {w!r}")
        out[str(name)] = value
    if names is not None:
        known = list(names)
        unknown = sorted(set(out) - set(known))
        if unknown:
            raise MixtureError(f"mixture weights{at} name unknown sources {unknown}; sources are {sorted(known)}")
        out = {name: out.get(name, 0.0) for name in known}
    if not any(out.values()):
        raise MixtureError(f"mixture weights{at} are all zero: {out}")
    if not math.isfinite(sum(out.values())):  # each finite, their sum not: a draw could not be made
        raise MixtureError(f"mixture weights{at} sum to more than the largest float ({out}); scale them down "
                           "(only their ratios matter)")
    return out


@dataclass(frozen=True)
class Constant:
    """The same weights at every step."""

    weights: Mapping[str, float]

    def __call__(self, step: int) -> Mapping[str, float]:
        return self.weights


@dataclass(frozen=True)
class Piecewise:
    """``weights[i]`` for ``boundaries[i-1] <= step < boundaries[i]``."""

    boundaries: tuple[int, ...]
    weights: tuple[Mapping[str, float], ...]

    def __call__(self, step: int) -> Mapping[str, float]:
        return self.weights[bisect_right(self.boundaries, step)]


@dataclass(frozen=True)
class Linear:
    """Linear interpolation from ``start`` (step 0) to ``end`` (step ``steps`` and after)."""

    start: Mapping[str, float]
    end: Mapping[str, float]
    steps: int

    def __call__(self, step: int) -> Mapping[str, float]:
        t = min(max(step, 0) / self.steps, 1.0)
        names = list(self.start) + [n for n in self.end if n not in self.start]
        return {n: (1 - t) * self.start.get(n, 0.0) + t * self.end.get(n, 0.0) for n in names}


def constant(weights: Mapping[str, float]) -> Constant:
    """Constant weights (validated now)."""
    return Constant(check_weights(weights))


def piecewise(boundaries: Sequence[int], weights: Sequence[Mapping[str, float]]) -> Piecewise:
    """Piecewise-constant weights; ``len(weights) == len(boundaries) + 1``, boundaries increasing."""
    bounds = tuple(int(b) for b in boundaries)
    if len(weights) != len(bounds) + 1:
        raise MixtureError(f"piecewise needs len(weights) == len(boundaries) + 1, got {len(weights)} and {len(bounds)}")
    if any(b <= a for a, b in pairwise(bounds)) or (bounds and bounds[0] < 1):
        raise MixtureError(f"piecewise boundaries must be strictly increasing steps >= 1, got {list(bounds)}")
    return Piecewise(bounds, tuple(check_weights(w, step=s) for w, s in zip(weights, (0,) + bounds)))


def linear(start: Mapping[str, float], end: Mapping[str, float], steps: int) -> Linear:
    """Linear curriculum from ``start`` to ``end`` over ``steps`` steps (``steps >= 1``)."""
    if not isinstance(steps, int) or steps < 1:
        raise MixtureError(f"linear schedule needs steps >= 1, got {steps!r}")
    return Linear(check_weights(start, step=0), check_weights(end, step=steps), steps)


def as_schedule(weights: WeightsLike) -> Schedule:
    """A mapping becomes :func:`constant`; a callable is taken as a schedule."""
    if isinstance(weights, Mapping):
        return constant(weights)
    if callable(weights):
        return weights
    raise MixtureError(f"weights must be a mapping or a callable step -> mapping, got {type(weights).__name__}")


def parse_weights(text: str) -> dict[str, float]:
    """``"web=0.7,code=0.3"`` -> ``{"web": 0.7, "code": 0.3}`` (for ``--mix``)."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise MixtureError(f"mixture weight {part!r} is not NAME=WEIGHT (in {text!r})")
        try:
            out[name.strip()] = float(value)
        except ValueError as e:
            raise MixtureError(f"mixture weight {part!r}: {value!r} is not a number") from e
    return check_weights(out)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def uniform(seed: int, step: int, draw: int) -> float:
    """A uniform number in ``[0, 1)`` that depends only on the three integers."""
    h = _splitmix64(seed & _MASK64)
    h = _splitmix64(h ^ (step & _MASK64))
    h = _splitmix64(h ^ (draw & _MASK64))
    return (h >> 11) / float(1 << 53)


def draw_source(weights: Mapping[str, float], seed: int, step: int, draw: int) -> str:
    """The source of draw number ``draw`` at ``step``: ``name`` with probability ``weight / total``.

    Names are taken in sorted order, so the result does not depend on the
    mapping's insertion order. Zero-weight names are never drawn.
    """
    names = sorted(n for n, w in weights.items() if w > 0)
    if not names:
        raise MixtureError(f"no source has a positive weight at {step=}: {dict(weights)}")
    total = math.fsum(weights[n] for n in names)
    target = uniform(seed, step, draw) * total
    acc = 0.0
    for name in names:
        acc += weights[name]
        if target < acc:
            return name
    return names[-1]  # rounding: target == total
