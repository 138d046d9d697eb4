"""Mix: draw documents from named sources by (scheduled) weight, at document level.

``Mix({"web": a, "code": b}, weights={"web": 0.7, "code": 0.3}, seed=0)``
yields the sources' items (documents) unchanged. Draw ``k`` at step ``s``
comes from ``transforms.draw_source(schedule(s), seed, s, k)``: a pure
function, so the mixture is deterministic given the seed and independent of
timing, workers or restarts. Mixing happens in the producer, so every global
batch carries the scheduled mixture and no rank sees a drifted one.

**The step.** ``weights`` may be a schedule over the producer's global step
(``transforms.piecewise``, ``transforms.linear`` or any ``step -> dict``).
Mix keeps that step itself, from what it has drawn, so it needs no feedback
from later stages: ``step = documents drawn // documents_per_step`` (default
1: the step is the document index), or with ``tokens_per_step`` (set it to
``global_batch_size * seq_len``) ``step = tokens drawn // tokens_per_step``,
which tracks the training step up to packing padding and ``Pack``'s window
read-ahead. Exactly one of the two may be given.

**Exhausted sources** (a source raising StopIteration when drawn):
``"stop"`` ends the stream there (the mixture stays exact to the end; every
source then counts as exhausted);
``"renormalize"`` drops the source and redraws among the others with their
weights renormalised, ending when no source with a positive weight is left;
``"cycle"`` resets the source and goes on (an empty source is an error).

**State** (JSON): every source's state under its name in ``"sources"``, the
draw and token counters (the step derives from them), the exhausted sources
and each source's epoch (cycle count). ``stats()`` returns :class:`MixStats`:
the realised share of each source over the last ``stats_window`` documents
next to its scheduled weight; ``torch_tgb.observability`` exports its flat
fields (``share_<source>`` -> Prometheus gauge ``tgb_share_<source>``) with
``role="mix"`` and ``id`` = :attr:`Mix.name` (the sources' names,
``"code+web"``, unless ``name=`` is given); pass the namespace it feeds with
``as_source(mix, namespace=ns)``.

**Steering** (``control=ControlChannel(ns)``): the trainer's control records
(``manifest/control.py``) replace the weights from their step on. Before a
draw at a step of a new control block, Mix reads that block's object (or
claims it, so no record can land there later), so a record takes effect at
exactly its step in every run, restarts included. :attr:`Mix.control_version`
is the version in force (``tgb.produce`` records it in each TGB's entry);
the state keeps where Mix stands in the records under ``"control"``.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torchdata.nodes import BaseNode

from torch_tgb.datapipes.produce._steer import Steering
from torch_tgb.lineage.sources import name_source, sources_of
from torch_tgb.errors import MixtureError
from torch_tgb.manifest.control import ControlChannel
from torch_tgb.transforms import WeightsLike, as_schedule, check_weights, draw_source
from torch_tgb.transforms.provenance import SourceInfo

__all__ = ["EXHAUSTED_POLICIES", "Mix", "MixStats"]

T = TypeVar("T")

EXHAUSTED_POLICIES = ("stop", "renormalize", "cycle")
#: the field of a mapping document that holds its tokens (for ``tokens_per_step``)
TOKENS_KEY = "tokens"
#: weight of the newest document in a source's cost average
COST_EMA = 0.02


@dataclass(frozen=True)
class MixStats:
    """Snapshot of a Mix: counters, the current step, realised vs scheduled shares."""

    documents: int = 0
    tokens: int = 0
    step: int = 0
    exhausted_sources: int = 0
    #: fraction of each source among the last ``stats_window`` documents drawn
    share: dict[str, float] = field(default_factory=dict)
    #: scheduled weight of each source at ``step``, normalised to sum to 1
    target: dict[str, float] = field(default_factory=dict)
    #: the control record in force (0: none, the schedule's weights)
    control_version: int = 0
    #: seconds a document of each source took to pull (EMA, weight 0.02): what a fleet sizes itself by
    cost: dict[str, float] = field(default_factory=dict)


def _num_tokens(item: Any) -> int:
    if isinstance(item, Mapping):
        item = item.get(TOKENS_KEY)
    if isinstance(item, torch.Tensor):
        return int(item.numel())
    try:
        return len(item)
    except TypeError as e:
        raise MixtureError(f"tokens_per_step needs documents with a length (or a {TOKENS_KEY!r} field)") from e


class Mix(BaseNode[T]):
    """Draws items from ``sources`` by weight; see the module docstring."""

    SOURCES_KEY = "sources"
    DRAWS_KEY = "draws"
    TOKENS_KEY = "tokens"
    EXHAUSTED_KEY = "exhausted"
    EPOCHS_KEY = "epochs"
    CONTROL_KEY = "control"

    def __init__(
        self,
        sources: Mapping[str, BaseNode[T]],
        weights: WeightsLike,
        *,
        seed: int = 0,
        exhausted: str = "stop",
        documents_per_step: int | None = None,
        tokens_per_step: int | None = None,
        stats_window: int = 10_000,
        name: str | None = None,
        control: ControlChannel | None = None,
    ) -> None:
        super().__init__()
        if not sources:
            raise MixtureError("Mix needs at least one source")
        if exhausted not in EXHAUSTED_POLICIES:
            raise MixtureError(f"exhausted must be one of {EXHAUSTED_POLICIES}, got {exhausted!r}")
        if documents_per_step is not None and tokens_per_step is not None:
            raise MixtureError("give documents_per_step or tokens_per_step, not both")
        for what, value in (("documents_per_step", documents_per_step), ("tokens_per_step", tokens_per_step)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise MixtureError(f"{what} must be an int >= 1, got {value!r}")
        self.sources = dict(sources)
        self.names = sorted(self.sources)
        for key, source in self.sources.items():  # an unnamed source's records are named by its key
            name_source(source, key)
        #: how exporters label this Mix (``id``): stable across restarts, unlike an object address
        self.name = name or "+".join(self.names)
        self.schedule = as_schedule(weights)
        check_weights(self.schedule(0), self.names, step=0)  # fail at construction, not mid-run
        self.seed = seed
        self.exhausted = exhausted
        self.documents_per_step = documents_per_step or 1  # unused when tokens_per_step is given
        self.tokens_per_step = tokens_per_step
        self._draws = 0
        self._tokens = 0
        self._exhausted: set[str] = set()
        self._epochs = dict.fromkeys(self.names, 0)
        self._recent: deque[str] = deque(maxlen=stats_window)
        if control is not None and not isinstance(control, ControlChannel):
            raise MixtureError(f"control must be a torch_tgb.manifest.ControlChannel, got {type(control).__name__}")
        self.steering = None if control is None else Steering(control, claimant=f"mix:{self.name}")
        self._steered: tuple[int, dict[str, float]] | None = None  # (version, its weights checked against names)
        self._cost: dict[str, float] = {}  # seconds per document pulled, by source (not state: a measurement)

    @property
    def mix(self) -> Mix[T]:
        """This node (the stages above a Mix forward ``mix`` to it)."""
        return self

    @property
    def control_version(self) -> int:
        """The version of the control record in force (0: none; without ``control=`` always 0)."""
        return 0 if self.steering is None else self.steering.version

    @property
    def step(self) -> int:
        """The step the next draw belongs to."""
        if self.tokens_per_step is not None:
            return self._tokens // self.tokens_per_step
        return self._draws // self.documents_per_step

    def reset(self, initial_state: dict | None = None) -> None:
        super().reset(initial_state)
        self._recent.clear()
        if self.steering is not None:  # a state saved without control starts at the first record
            self.steering.reset(None if initial_state is None else initial_state.get(self.CONTROL_KEY))
        if initial_state is None:
            for source in self.sources.values():
                source.reset(None)
            self._draws = self._tokens = 0
            self._exhausted = set()
            self._epochs = dict.fromkeys(self.names, 0)
            return
        states = initial_state[self.SOURCES_KEY]
        missing = sorted(set(self.names) - set(states))
        if missing:
            raise MixtureError(f"Mix state has no state for sources {missing} (it has {sorted(states)})")
        for name, source in self.sources.items():
            source.reset(states[name])
        self._draws = int(initial_state[self.DRAWS_KEY])
        self._tokens = int(initial_state[self.TOKENS_KEY])
        self._exhausted = set(initial_state[self.EXHAUSTED_KEY])
        self._epochs = {name: int(initial_state[self.EPOCHS_KEY].get(name, 0)) for name in self.names}

    def get_state(self) -> dict[str, Any]:
        state = {
            self.SOURCES_KEY: {name: self.sources[name].state_dict() for name in self.names},
            self.DRAWS_KEY: self._draws,
            self.TOKENS_KEY: self._tokens,
            self.EXHAUSTED_KEY: sorted(self._exhausted),
            self.EPOCHS_KEY: dict(self._epochs),
        }
        if self.steering is not None:
            state[self.CONTROL_KEY] = self.steering.state()
        return state

    def _weights_at(self, step: int) -> dict[str, float]:
        """The weights of draws at ``step``: the control record in force, else the schedule's."""
        if self.steering is not None and self.steering.at(step) is not None:
            return self._control_weights()
        return check_weights(self.schedule(step), self.names, step=step)

    def _control_weights(self) -> dict[str, float]:
        """The weights of the record in force, checked against the sources once per version."""
        assert self.steering is not None and self.steering.weights is not None
        version = self.steering.version
        if self._steered is None or self._steered[0] != version:
            try:
                weights = check_weights(self.steering.weights, self.names, step=self.step)
            except MixtureError as e:
                raise MixtureError(f"{self.steering.channel.url}: control record version {version}: {e} (records "
                                   "are immutable: write the next one with the sources' names, "
                                   "ControlChannel.set_mix(..., sources=))") from e
            self._steered = (version, weights)
        return self._steered[1]

    def next(self) -> T:
        step = self.step
        weights = self._weights_at(step)
        while True:
            live = {n: w for n, w in weights.items() if n not in self._exhausted}
            if not any(live.values()):
                raise StopIteration
            name = draw_source(live, self.seed, step, self._draws)
            started = time.perf_counter()
            try:
                item = self._pull(name)
            except StopIteration:
                if self.exhausted == "stop":
                    self._exhausted.update(self.names)  # the stream ends here, also after a restore
                    raise
                self._exhausted.add(name)  # renormalize: redraw the same draw among the rest
                continue
            took = time.perf_counter() - started
            before = self._cost.get(name)
            self._cost[name] = took if before is None else before + COST_EMA * (took - before)
            break
        self._draws += 1
        if self.tokens_per_step is not None:
            self._tokens += _num_tokens(item)
        self._recent.append(name)
        return item

    def _pull(self, name: str) -> T:
        source = self.sources[name]
        try:
            return next(source)
        except StopIteration:
            if self.exhausted != "cycle":
                raise
        source.reset(None)
        self._epochs[name] += 1
        try:
            return next(source)
        except StopIteration:
            raise MixtureError(
                f"source {name!r} yields nothing after a reset; exhausted='cycle' needs a non-empty source"
            ) from None

    def provenance_sources(self) -> list[SourceInfo] | None:
        """The sources whose records the drawn documents name; None if one of them names none."""
        found: list[SourceInfo] = []
        for name in self.names:
            infos = sources_of(self.sources[name])
            if infos is None:
                return None
            found.extend(infos)
        return found

    def stats(self) -> MixStats:
        counts = Counter(self._recent)
        n = len(self._recent)
        step = self.step
        try:
            if self.steering is not None and self.steering.weights is not None:
                weights = self._control_weights()
            else:
                weights = check_weights(self.schedule(step), self.names, step=step)
        except MixtureError:
            weights = dict.fromkeys(self.names, 0.0)
        total = sum(weights.values()) or 1.0
        return MixStats(
            documents=self._draws,
            tokens=self._tokens,
            step=step,
            exhausted_sources=len(self._exhausted),
            share={name: counts[name] / n if n else 0.0 for name in self.names},
            target={name: weights[name] / total for name in self.names},
            control_version=self.control_version,
            cost=dict(self._cost),
        )
