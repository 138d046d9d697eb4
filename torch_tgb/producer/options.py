"""ProduceOptions: how a producer writes and commits, as one frozen value every entry point relays whole.

``tgb.produce``, ``write_dataset``, ``tgb produce`` and the Ray ``Fleet`` take
``options=ProduceOptions(...)`` and, for convenience, the same fields as
keyword arguments (typed through :class:`ProduceSettings`, folded in by
:meth:`ProduceOptions.with_settings`): one spelling per option. The
producer's tuning (segments, pending bound, snapshots) is
``config=ProducerConfig(...)`` everywhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from torch_tgb._options import with_fields
from torch_tgb.producer.config import ProducerConfig
from torch_tgb.producer.policies import CommitPolicy

if TYPE_CHECKING:
    from torch_tgb.producer.producer import Producer

__all__ = ["ProduceOptions", "ProduceSettings"]


@dataclass(frozen=True)
class ProduceOptions:
    """How a producer run writes and commits.

    ``commit_policy``: ``"dac"`` | ``"naive"`` | ``"fixed:k"`` | ``"incr"`` |
    ``"aimd"`` or a :class:`CommitPolicy`. ``max_lag``: pause appends while the
    namespace is more than that many steps ahead of the checkpoints' safe
    boundary. ``max_steps``: stop once this producer holds that many offsets.
    ``seal``: mark the producer (or its shard) done at the end, see
    ``tgb.produce``. ``config``: the producer's tuning (``segment_tgbs``,
    ``segment_bytes``, ``max_pending``, ...); ``None``: ~64 MiB segments, or one
    object per batch for a paced stream (``rate=``), see :func:`~torch_tgb.producer.config.run_config`.
    ``metadata``: recorded in
    ``dataset.json`` (every producer of a namespace passes the same).

    Progress: ``progress`` (a bar on a terminal; ``None``: only if stderr is
    one, a log line every 30 s otherwise), ``label`` and ``expected_batches``
    (the bar's text and total, an estimate); ``on_append(offset)`` is called
    after every batch appended (a caller's progress report, a test's crash point).
    ``rate``: at most that many batches per second (a stream's pace).
    ``watch(producer)``: a context manager held open around the run with the
    open :class:`Producer` (periodic stats logging, a metrics endpoint).
    ``stop``: an event another thread (a SIGINT handler) sets to end the run
    after the batch in hand: what was appended is committed, the producer is
    closed (mark ``closed``, not left ``open``) and the report says
    ``interrupted``.
    ``codecs``: tensor name -> codec spec, those tensors stored compressed at
    rest (``Producer(codecs=)``; e.g. ``{"pixel_values": "zstd:1+delta:3x14x14"}``).
    """

    commit_policy: str | CommitPolicy = "dac"
    max_lag: int | None = None
    max_steps: int | None = None
    seal: bool | None = None
    config: ProducerConfig | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    progress: bool | None = None
    label: str | None = None
    expected_batches: int | None = None
    on_append: Callable[[int], None] | None = None
    rate: float | None = None
    watch: Callable[[Producer], AbstractContextManager[object]] | None = None
    stop: threading.Event | None = None
    codecs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_steps is not None and (
            isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 0
        ):
            raise ValueError(f"max_steps={self.max_steps!r} must be a non-negative int or None")
        if self.max_lag is not None and self.max_lag < 1:
            raise ValueError(f"max_lag={self.max_lag} must be >= 1 or None")
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"rate={self.rate!r} must be > 0 batches per second, or None")
        if self.config is not None and not isinstance(self.config, ProducerConfig):
            raise TypeError(f"config must be a ProducerConfig or None, got {type(self.config).__name__}")

    def with_settings(self, settings: Mapping[str, object]) -> ProduceOptions:
        """These options with ``settings`` (field name -> value) replacing fields; unknown names are a TypeError."""
        return with_fields(self, settings, "produce")



class ProduceSettings(TypedDict, total=False):
    """The fields of :class:`ProduceOptions` as keyword arguments of ``tgb.produce`` and ``write_dataset``."""

    commit_policy: str | CommitPolicy
    max_lag: int | None
    max_steps: int | None
    seal: bool | None
    config: ProducerConfig | None
    metadata: Mapping[str, Any]
    progress: bool | None
    label: str | None
    expected_batches: int | None
    on_append: Callable[[int], None] | None
    rate: float | None
    watch: Callable[[Producer], AbstractContextManager[object]] | None
    stop: threading.Event | None
    codecs: Mapping[str, str]
