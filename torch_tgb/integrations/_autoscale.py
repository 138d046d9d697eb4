"""When a producer fleet grows or shrinks: a pure policy over the signals a fleet already has.

:meth:`AutoscalePolicy.decide` maps one :class:`FleetSignals` (what the driver
measured this round) and the time of the last change to a :class:`Decision`:
how many actors to run and why. No Ray, no clock, no I/O: the driver
(``_scaler.py``) gathers the signals and applies the decision, and tests hit
the rules directly with hypothesis (``tests/integrations/test_autoscale_policy.py``).

The signals and the rules, in order:

1. **Bounds**: the target stays in ``[min_actors, max_actors]`` and never
   exceeds the shards there are (an actor runs one shard at a time).
2. **Paused by ``max_lag``**: the producers are as far ahead as the trainers'
   checkpoints allow, so more of them cannot help: never scale up. If the
   trainer does not stall either, one actor goes (capacity exceeds demand).
3. **Demand**: a producer spends ``batch_s`` seconds on a batch; a trainer
   that ran ``rate`` steps a second while stalling a fraction ``stall`` of
   the time would run ``rate / (1 - stall)`` unstalled, so it needs
   ``need = ceil(batch_s * cost_ratio * rate / (1 - stall) * headroom)``
   actors. ``cost_ratio`` is the mixture-driven part (OVERLORD §5.2): the cost
   of a batch under the weights the producers are about to use (a control
   record or schedule step ahead of them) over its cost under the current
   ones, from each source's measured cost per document; a source whose weight
   doubles raises it before any stall shows.
4. **Up** when the trainer stalls (``stall > stall_high``) and the producers
   are not ahead (``lead <= lead_low``), or when the mixture ahead costs more
   (``cost_ratio > 1 + ratio_tolerance``) and ``need`` exceeds the actors:
   to ``max(actors + 1, need)``, once ``up_cooldown_s`` has passed since
   the last change (new actors take a while to show in the signals).
   Also **up** to ``need`` whenever ``need`` exceeds the actors (the
   producers are measurably slower than the trainer wants: act before the
   lead drains into a stall; ``benchmarks/autoscale.py`` measured the
   difference).
5. **Down** by one actor when the trainer does not stall (``stall <= stall_low``),
   the producers are far ahead (``lead >= lead_high``) and ``need`` is below
   the actors, once ``down_cooldown_s`` has passed: the victim's shard is
   requeued and resumes at its last commit (its TGBs exactly once, as when
   ``Fleet.scale`` shrinks the pool).
6. Otherwise hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["AutoscalePolicy", "Decision", "FleetSignals"]


@dataclass(frozen=True)
class FleetSignals:
    """What the fleet's driver knows at ``time``; ``None`` where it does not know (yet)."""

    time: float
    actors: int
    shards: int
    #: fraction of the trainer's wall time spent waiting for data, over its last report window
    stall: float | None = None
    #: trainer steps per second over the same window
    rate: float | None = None
    #: steps committed ahead of the trainer's position
    lead: int | None = None
    #: some producer is paused by max_lag right now
    paused: bool = False
    #: seconds a producer spends on one batch (pipeline + write), mean over the running shards
    batch_s: float | None = None
    #: cost of a batch under the weights ahead over its cost under the current ones (mixture-driven)
    cost_ratio: float = 1.0
    #: the sources whose weight rises ahead (for the decision's reason)
    rising: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """Run ``target`` actors; ``direction`` is ``"up"``, ``"down"`` or ``"hold"``; ``reason`` says why."""

    target: int
    direction: str
    reason: str
    need: int | None = None


@dataclass(frozen=True)
class AutoscalePolicy:
    """The thresholds of :meth:`decide` (module docstring); ``FleetConfig(autoscale=(min, max))`` builds one."""

    min_actors: int
    max_actors: int
    stall_high: float = 0.05
    stall_low: float = 0.01
    lead_low: int = 8
    lead_high: int = 64
    headroom: float = 1.2
    ratio_tolerance: float = 0.1
    up_cooldown_s: float = 5.0
    down_cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_actors <= self.max_actors:
            raise ValueError(f"autoscale=({self.min_actors}, {self.max_actors}) needs 1 <= min <= max")
        if not 0 <= self.stall_low <= self.stall_high < 1:
            raise ValueError(f"needs 0 <= stall_low ({self.stall_low}) <= stall_high ({self.stall_high}) < 1")
        if not 0 <= self.lead_low <= self.lead_high:
            raise ValueError(f"needs 0 <= lead_low ({self.lead_low}) <= lead_high ({self.lead_high})")
        if self.headroom < 1 or self.ratio_tolerance < 0 or self.up_cooldown_s < 0 or self.down_cooldown_s < 0:
            raise ValueError("headroom must be >= 1; ratio_tolerance and the cooldowns >= 0")

    def bounds(self, shards: int) -> tuple[int, int]:
        """The actors this policy may run with ``shards`` shards: ``[min(min, shards), min(max, shards)]``."""
        return min(self.min_actors, shards), min(self.max_actors, shards)

    def need(self, s: FleetSignals) -> int | None:
        """Actors that keep the trainer fed at its unstalled rate under the mixture ahead (None: unknown yet)."""
        if s.batch_s is None or s.rate is None or s.batch_s <= 0 or s.rate <= 0:
            return None
        stall = min(max(s.stall or 0.0, 0.0), 0.95)
        demand = s.rate / (1.0 - stall)  # the steps per second the trainer would take if it never waited
        return max(1, math.ceil(s.batch_s * max(s.cost_ratio, 0.0) * demand * self.headroom - 1e-9))

    def decide(self, s: FleetSignals, last_change: float | None) -> Decision:
        """The number of actors to run now, and why (module docstring, rules 1-6)."""
        low, high = self.bounds(max(s.shards, 1))
        need = self.need(s)
        if s.actors < low:
            return Decision(low, "up", f"below the minimum of {low} actors", need)
        if s.actors > high:
            return Decision(high, "down", f"above the maximum of {high} actors", need)
        since = math.inf if last_change is None else s.time - last_change
        stall = s.stall
        calm = stall is not None and stall <= self.stall_low
        if s.paused:
            if calm and since >= self.down_cooldown_s and s.actors > low:
                return Decision(s.actors - 1, "down", "paused by max_lag and the trainer does not wait: "
                                "more capacity than demand", need)
            return Decision(s.actors, "hold", "paused by max_lag: more producers cannot help", need)
        starving = stall is not None and stall > self.stall_high and (s.lead is None or s.lead <= self.lead_low)
        costlier = s.cost_ratio > 1.0 + self.ratio_tolerance and need is not None and need > s.actors
        behind = need is not None and need > s.actors and s.stall is not None
        if (starving or costlier or behind) and s.actors < high:
            if since < self.up_cooldown_s:
                return Decision(s.actors, "hold", "cooling down after the last change", need)
            target = min(high, max(s.actors + 1, need or 0))
            if costlier:
                sources = ", ".join(s.rising) or "the mixture ahead"
                why = f"mixture ahead costs {s.cost_ratio:.2f}x ({sources}): {need} actors needed"
            elif starving:
                lead_text = "no lead known" if s.lead is None else f"the producers {max(s.lead, 0)} steps ahead"
                why = f"trainer waits {stall:.0%} of the time with {lead_text}"
            else:
                why = f"{s.batch_s:.3g} s a batch at {s.rate:.3g} steps/s needs {need} actors (lead {s.lead} steps)"
            return Decision(target, "up", why, need)
        ahead = s.lead is not None and s.lead >= self.lead_high
        if calm and ahead and s.actors > low and (need is None or need < s.actors):
            if since < self.down_cooldown_s:
                return Decision(s.actors, "hold", "cooling down after the last change", need)
            return Decision(s.actors - 1, "down", f"trainer does not wait and the producers are {s.lead} steps "
                            "ahead", need)
        return Decision(s.actors, "hold", "demand met", need)
