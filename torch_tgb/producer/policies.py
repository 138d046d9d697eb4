"""Commit policies: when the background committer makes its next attempt.

A policy answers two questions for the producer's committer thread:

- ``wait_time(pending, since_last)``: seconds to wait before the next attempt
  (``0`` = now, ``None`` = wait for more entries), given the number of
  pending entries and the seconds since the last attempt finished;
- ``on_attempt(...)``: learn from an attempt's outcome.

``max_entries`` caps how many pending entries one version carries (never more
than ``manifest.records.MAX_VERSION_ENTRIES``, which keeps a version readable).
Count policies (Naive, Fixed, Incr) wait for entries; time policies (AIMD,
DAC) wait for a gap. ``flush()`` overrides "wait for entries" but never a gap.

Baselines follow the BatchWeave paper (§7.1): Naive commits every TGB on its
own; Fixed(k) every k TGBs; Incr starts at 10 and adds 1 per conflict; AIMD
is TCP's rule on the commit rate (additive increase on success, halved on
conflict). DAC is in :mod:`torch_tgb.producer.dac`.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Callable
from dataclasses import dataclass

from torch_tgb._registry import Registry
from torch_tgb.producer import dac
from torch_tgb.producer.config import ProducerConfig

__all__ = [
    "AIMDPolicy",
    "COMMIT_POLICIES",
    "CommitPolicy",
    "DACPolicy",
    "FixedPolicy",
    "IncrPolicy",
    "NaivePolicy",
    "PolicyFactory",
    "make_policy",
]


class CommitPolicy(abc.ABC):
    """Decides the waiting between commit attempts. One instance per producer."""

    #: short name used in stats and benchmarks
    name: str = "policy"
    #: most entries one version may carry (``None``: all pending, up to ``MAX_VERSION_ENTRIES``)
    max_entries: int | None = None

    @abc.abstractmethod
    def wait_time(self, pending: int, since_last: float) -> float | None:
        """Seconds until the next attempt; ``None`` while the policy wants more entries."""

    def on_attempt(self, *, success: bool, window_s: float, active_producers: int) -> None:
        """Called after every attempt that wrote (success or conflict)."""

    @property
    def gap_s(self) -> float:
        """The current waiting gap after an attempt (0 for count policies)."""
        return 0.0

    @property
    def active_horizon_s(self) -> float:
        """A producer counts as active if it committed within this many seconds."""
        return 10.0


class _CountPolicy(CommitPolicy):
    """Attempt as soon as ``threshold`` entries are pending."""

    threshold: int = 1

    def wait_time(self, pending: int, since_last: float) -> float | None:
        return 0.0 if pending >= max(1, self.threshold) else None


class NaivePolicy(_CountPolicy):
    """Commit every TGB on its own, at once."""

    name = "naive"
    max_entries = 1
    threshold = 1


class FixedPolicy(_CountPolicy):
    """Commit whenever ``k`` TGBs are pending."""

    def __init__(self, k: int = 10) -> None:
        if k < 1:
            raise ValueError(f"FixedPolicy: k={k} must be >= 1")
        self.threshold = k
        self.name = f"fixed{k}"


class IncrPolicy(_CountPolicy):
    """Commit every ``k`` TGBs, ``k`` starting at ``start`` and growing by ``step`` per conflict."""

    name = "incr"

    def __init__(self, start: int = 10, step: int = 1) -> None:
        if start < 1 or step < 0:
            raise ValueError(f"IncrPolicy: start={start} must be >= 1 and step={step} >= 0")
        self.threshold = start
        self.step = step

    def on_attempt(self, *, success: bool, window_s: float, active_producers: int) -> None:
        if not success:
            self.threshold += self.step


class AIMDPolicy(CommitPolicy):
    """TCP-style AIMD on the commit rate: ``+ increase`` attempts/s on success, halved on conflict.

    The gap after an attempt is ``1 / rate``. The paper describes AIMD as
    "increase the interval by a fixed addend on success, halve it on
    conflict", with the interval read as TCP's window (a rate): that reading
    backs off on conflicts, as the paper's 95.5 % success rate shows AIMD does.
    """

    name = "aimd"

    def __init__(
        self, increase: float = 0.02, initial_rate: float = 1.0, min_rate: float = 0.05, max_rate: float = 1000.0
    ) -> None:
        if increase <= 0 or not 0 < min_rate <= initial_rate <= max_rate:
            raise ValueError("AIMDPolicy: need increase > 0 and 0 < min_rate <= initial_rate <= max_rate")
        self.increase = increase
        self.min_rate, self.max_rate = min_rate, max_rate
        self._rate = initial_rate

    def wait_time(self, pending: int, since_last: float) -> float | None:
        return None if pending < 1 else max(0.0, self.gap_s - since_last)

    def on_attempt(self, *, success: bool, window_s: float, active_producers: int) -> None:
        rate = self._rate + self.increase if success else self._rate / 2.0
        self._rate = min(self.max_rate, max(self.min_rate, rate))

    @property
    def rate(self) -> float:
        return self._rate

    @property
    def gap_s(self) -> float:
        return 1.0 / self._rate


@dataclass(frozen=True)
class DACConfig:
    """DAC parameters. Defaults: conflict budget 5 %, duty budget 10 %, ±10 % jitter, EMA weight 0.2.

    ``active_gaps``: a producer is active if it committed within that many of
    our cycles (``W + g``), but never less than ``min_active_s`` seconds.
    ``max_gap_s`` caps the gap among up to ``cap_producers`` producers, so
    that a burst of slow writes cannot stall a producer; among more, the cap
    grows in proportion to ``N - 1``, as the conflict gap does (``dac.gap_cap``):
    30 s per 31 other producers binds at a fragile window of about 50 ms at any N.
    ``ceiling_s`` bounds every gap, jitter included: keep it at the producer's
    ``ProducerConfig.max_commit_delay_s`` (the same default), past which the
    commit loop commits anyway, unjittered, and retries at once after a conflict.
    The jitter need only be wide against the fragile window (±10 % of a 6 s
    gap is ±0.6 s against a 40 ms window); a wider one lowers the mean gap
    under the ceiling, ``ceiling_s / (1 + jitter)``, and raises the conflict rate where it binds.
    """

    epsilon_c: float = 0.05
    epsilon_d: float = 0.1
    jitter: float = 0.1
    ema_weight: float = 0.2
    active_gaps: float = 4.0
    min_active_s: float = 2.0
    max_gap_s: float = 30.0
    cap_producers: int = 32
    ceiling_s: float = ProducerConfig.max_commit_delay_s


class DACPolicy(CommitPolicy):
    """Decentralized Adaptive Commit: the smallest gap meeting the conflict and duty budgets.

    The gap is capped (a cap that grows with N), then jittered; the gap after
    a producer's first attempt is a uniform share of that, so producers
    started together spread over the cycle instead of committing in bursts.
    """

    name = "dac"

    def __init__(self, config: DACConfig | None = None, *, seed: int | None = None) -> None:
        self.config = config or DACConfig()
        # validate the budgets once, up front
        dac.optimal_gap(0.0, 2, epsilon_c=self.config.epsilon_c, epsilon_d=self.config.epsilon_d)
        dac.jittered(0.0, self.config.jitter, 0.0)
        dac.gap_cap(self.config.max_gap_s, 1, reference_producers=self.config.cap_producers)
        dac.next_gap(0.0, 0.0, self.config.jitter, 0.0, ceiling=self.config.ceiling_s)
        self._rng = random.Random(seed)
        self._window: float | None = None
        self._gap = 0.0
        self._producers = 1

    def wait_time(self, pending: int, since_last: float) -> float | None:
        return None if pending < 1 else max(0.0, self._gap - since_last)

    def on_attempt(self, *, success: bool, window_s: float, active_producers: int) -> None:
        c = self.config
        first = self._window is None
        self._window = dac.ema(self._window, window_s, c.ema_weight)
        self._producers = max(1, active_producers)
        target = dac.optimal_gap(self._window, self._producers, epsilon_c=c.epsilon_c, epsilon_d=c.epsilon_d)
        cap = dac.gap_cap(c.max_gap_s, self._producers, reference_producers=c.cap_producers)
        gap = dac.next_gap(target, cap, c.jitter, self._rng.uniform(-c.jitter, c.jitter), ceiling=c.ceiling_s)
        self._gap = dac.first_gap(gap, self._rng.random()) if first else gap

    @property
    def gap_s(self) -> float:
        return self._gap

    @property
    def fragile_window_s(self) -> float:
        return self._window or 0.0

    @property
    def active_horizon_s(self) -> float:
        cycle = (self._window or 0.0) + self._gap
        return max(self.config.min_active_s, self.config.active_gaps * cycle)


#: ``factory(arg) -> CommitPolicy`` for ``commit_policy="NAME"`` (``arg`` None) or ``"NAME:ARG"``
PolicyFactory = Callable[[str | None], CommitPolicy]

#: commit policies by name (``Producer(commit_policy=...)``, ``tgb produce --commit-policy``)
COMMIT_POLICIES: Registry[PolicyFactory] = Registry("commit policy", group="torch_tgb.commit_policies")


def _no_argument(cls: type[CommitPolicy], name: str) -> PolicyFactory:
    def make(arg: str | None) -> CommitPolicy:
        if arg is not None:
            raise ValueError(f"commit_policy='{name}:{arg}': only 'fixed' takes an argument")
        return cls()

    return make


def _fixed(arg: str | None) -> CommitPolicy:
    raw = arg or "10"
    if not raw.isdigit():
        raise ValueError(f"commit_policy='fixed:{arg}': fixed takes an integer, e.g. 'fixed:10'")
    return FixedPolicy(int(raw))


COMMIT_POLICIES.register("fixed", _fixed)
for _name, _cls in (("naive", NaivePolicy), ("incr", IncrPolicy), ("aimd", AIMDPolicy), ("dac", DACPolicy)):
    COMMIT_POLICIES.register(_name, _no_argument(_cls, _name))


def make_policy(spec: str | CommitPolicy) -> CommitPolicy:
    """``"naive"``, ``"fixed:10"``, ``"incr"``, ``"aimd"``, ``"dac"``, a plugin's name (or a policy, returned as is).

    ``"NAME:ARG"`` hands ``ARG`` to the factory registered as ``NAME`` in
    :data:`COMMIT_POLICIES`; ``"fixedK"`` is ``"fixed:K"``.
    """
    if isinstance(spec, CommitPolicy):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"commit_policy must be a name or a CommitPolicy, got {type(spec).__name__}")
    name, sep, arg = spec.strip().lower().partition(":")
    if name.startswith("fixed") and name[5:].isdigit() and not sep:
        name, sep, arg = "fixed", ":", name[5:]
    policy = COMMIT_POLICIES[name](arg if sep else None)
    if not isinstance(policy, CommitPolicy):
        raise TypeError(f"commit_policy={spec!r}: the factory registered as {name!r} returned "
                        f"{type(policy).__name__}, not a CommitPolicy")
    return policy
