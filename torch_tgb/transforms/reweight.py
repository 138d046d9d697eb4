"""Mixture weights from per-domain losses: DoReMi's exponentiated-gradient update (pure).

:func:`exponentiated_gradient` is one step of Algorithm 1 of DoReMi (Xie et
al., "DoReMi: Optimizing Data Mixtures Speeds Up Language Model
Pretraining", NeurIPS 2023, §2): with per-domain losses ``l_i`` of the model
being trained and, optionally, of a reference model ``r_i``, the excess loss
is ``lam_i = max(l_i - r_i, 0)``, the weights move multiplicatively towards
the domains where the model lags, ``a'_i = a_i * exp(step_size * lam_i)``,
and are renormalised and smoothed towards uniform,
``a_i = (1 - c) * a'_i / sum(a') + c / k``, so no domain is ever starved
(``c`` = ``smoothing``, ``k`` domains). DoReMi uses ``step_size = 1`` and
``c = 1e-3``; ADO (Jiang et al., 2024) and Skill-It drive the same kind of
update with other per-domain signals (a fitted scaling law's slope, a skill
graph), which can be passed as ``losses`` with ``reference=None``.

Without a reference the update uses the losses themselves: ``exp(eta * l_i)``
up to a factor common to all domains, i.e. it favours the domains with the
highest loss. The result feeds a control record:
``ControlChannel(ns).set_mix(exponentiated_gradient(...), step=...)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from torch_tgb.errors import MixtureError

__all__ = ["exponentiated_gradient"]


def exponentiated_gradient(
    weights: Mapping[str, float], losses: Mapping[str, float], *, reference: Mapping[str, float] | None = None,
    step_size: float = 1.0, smoothing: float = 1e-3,
) -> dict[str, float]:
    """One DoReMi update of ``weights`` (any positive scale) by per-domain ``losses``; sums to 1.

    Every name of ``weights`` needs a finite loss (and a reference loss, when
    ``reference`` is given); a name with weight 0 stays reachable through the
    smoothing only. Raises :class:`~torch_tgb.errors.MixtureError` on bad input.
    """
    if not weights:
        raise MixtureError("exponentiated_gradient needs at least one domain")
    if not (math.isfinite(step_size) and step_size >= 0):
        raise MixtureError(f"step_size={step_size!r} must be finite and >= 0")
    if not (math.isfinite(smoothing) and 0 <= smoothing <= 1):
        raise MixtureError(f"smoothing={smoothing!r} must be in [0, 1]")
    names = sorted(weights)
    for what, values in (("losses", losses), ("reference", reference)):
        if values is None:
            continue
        missing = [n for n in names if n not in values]
        if missing:
            raise MixtureError(f"exponentiated_gradient: {what} has no value for {missing}")
        bad = {n: values[n] for n in names if not isinstance(values[n], (int, float)) or not math.isfinite(values[n])}
        if bad:
            raise MixtureError(f"exponentiated_gradient: {what} must be finite numbers, got {bad}")
    total = math.fsum(float(weights[n]) for n in names)
    if any(not math.isfinite(float(weights[n])) or weights[n] < 0 for n in names) or not total > 0:
        raise MixtureError(f"exponentiated_gradient: weights must be finite, >= 0 and not all 0, got {dict(weights)}")
    if reference is None:
        excess = {n: float(losses[n]) for n in names}
    else:
        excess = {n: max(float(losses[n]) - float(reference[n]), 0.0) for n in names}
    top = max(excess.values())  # exp of differences from the largest: no overflow, the same ratios
    scaled = {n: float(weights[n]) / total * math.exp(step_size * (excess[n] - top)) for n in names}
    norm = math.fsum(scaled.values())
    k = len(names)
    if norm <= 0:  # every domain with weight underflowed to 0: only the smoothing is left
        return {n: 1.0 / k for n in names}
    return {n: (1.0 - smoothing) * scaled[n] / norm + smoothing / k for n in names}
