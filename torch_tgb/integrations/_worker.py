"""The worker of a producer fleet: runs one shard at a time through ``tgb.produce``.

:class:`ShardWorker` is a plain class; the fleet turns it into a Ray actor
(``ray.remote``), so this module needs no Ray. A worker holds no state that
matters: the shard's offsets and pipeline state live in the namespace's log,
which is why a restarted or re-scheduled worker (or any other) can take the
shard over. It reports progress while it runs (``progress()`` is served on a
second actor thread) from two meters: the batches it pulls from the pipeline
(:class:`MeteredNode`) and the producer's hook points (:class:`ShardMeter`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from torchdata.nodes import BaseNode

from torch_tgb.errors import FencedError
from torch_tgb.integrations._fleet_types import ShardOutcome
from torch_tgb.layout import Layout
from torch_tgb.producer import ProduceOptions, produce
from torch_tgb.producer.config import ProducerConfig

if TYPE_CHECKING:
    from torch_tgb.producer import Producer

__all__ = ["MeteredNode", "ShardMeter", "ShardWorker", "WorkerSpec"]


class ShardMeter:
    """Counts one producer incarnation's writes and commit attempts through its hook points.

    Hooks run on the appending thread (``after_object_write``) and the commit
    thread (``before_commit``, ``after_commit``), hence the lock. A successful
    attempt commits every TGB written before it started (the commit loop takes
    all pending entries), which gives the visibility lag of each TGB (write ->
    commit) and the TGBs still waiting (``lag``).
    """

    def __init__(self, user_hook: Callable[[str], None] | None = None) -> None:
        self._user_hook = user_hook
        self._lock = threading.Lock()
        self._written_at: list[float] = []
        self._attempt_covers = 0
        self._committed_writes = 0
        self.bytes = 0
        self.commit_attempts = 0
        self.commit_successes = 0
        self.visibility_lag_sum_s = 0.0
        self.visibility_lag_max_s = 0.0
        # what an autoscaling driver reads (integrations/_scaler.py): the producer (paused by max_lag?),
        # seconds per batch in the pipeline (EMA), and the pipeline's Mix (costs, weights, step)
        self.producer: Producer | None = None
        self.batch_s = 0.0
        self.batches = 0
        self.mix: Any = None

    def __call__(self, point: str) -> None:
        now = time.monotonic()
        with self._lock:
            if point == "after_object_write":
                self._written_at.append(now)
            elif point == "before_commit":
                self.commit_attempts += 1
                self._attempt_covers = len(self._written_at)
            elif point == "after_commit":
                self.commit_successes += 1
                for written in self._written_at[self._committed_writes : self._attempt_covers]:
                    self.visibility_lag_sum_s += now - written
                    self.visibility_lag_max_s = max(self.visibility_lag_max_s, now - written)
                self._committed_writes = max(self._committed_writes, self._attempt_covers)
        if self._user_hook is not None:
            self._user_hook(point)

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes += n

    def add_batch(self, seconds: float) -> None:
        """One batch took ``seconds`` in the pipeline (EMA weight 0.2 after the first)."""
        with self._lock:
            self.batch_s = seconds if not self.batches else self.batch_s + 0.2 * (seconds - self.batch_s)
            self.batches += 1

    @contextlib.contextmanager
    def watching(self, producer: Producer) -> Iterator[None]:
        """``ProduceOptions(watch=)``: the shard's producer, for its ``paused`` flag, while it runs."""
        self.producer = producer
        try:
            yield
        finally:
            self.producer = None

    def _scaling(self) -> dict[str, float]:
        """The signals an autoscaling driver reads (not counters: not folded over attempts)."""
        out: dict[str, float] = {"batch_s": self.batch_s}
        producer = self.producer
        if producer is not None:
            out["paused"] = 1.0 if producer.paused else 0.0
        mix = self.mix
        if mix is not None:
            try:
                stats = mix.stats()  # read from the progress thread while the pipeline draws
            except RuntimeError:  # its window changed under us: next report
                return out
            out["mix_step"] = float(stats.step)
            out["docs_per_batch"] = stats.documents / self.batches if self.batches else 0.0
            out.update({f"cost:{k}": float(v) for k, v in stats.cost.items()})
            out.update({f"weight:{k}": float(v) for k, v in stats.target.items()})
            if not stats.control_version:  # steered: the records ahead are the driver's to read
                out.update(_schedule_ahead(mix, stats.step + SCHEDULE_LOOKAHEAD))
        return out

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            written = len(self._written_at)
            return {
                "appended": written,
                "bytes": self.bytes,
                "commit_attempts": self.commit_attempts,
                "commit_successes": self.commit_successes,
                "lag": written - self._committed_writes,
                "committed_writes": self._committed_writes,
                "visibility_lag_sum_s": self.visibility_lag_sum_s,
                "visibility_lag_max_s": self.visibility_lag_max_s,
                **self._scaling(),
            }


T = TypeVar("T")


#: how many Mix steps ahead a worker reports its schedule's weights (mixture-driven autoscaling)
SCHEDULE_LOOKAHEAD = 64


def _schedule_ahead(mix: Any, step: int) -> dict[str, float]:
    """``ahead:<source>``: the Mix schedule's normalised weights at ``step`` (none if it has no valid ones)."""
    schedule = getattr(mix, "schedule", None)
    try:
        weights = {str(k): float(v) for k, v in schedule(step).items()} if callable(schedule) else {}
    except Exception:  # noqa: BLE001 - a measurement: the pipeline itself reports a bad schedule by name
        return {}
    total = sum(max(v, 0.0) for v in weights.values())
    return {f"ahead:{k}": max(v, 0.0) / total for k, v in weights.items()} if total > 0 else {}


class MeteredNode(BaseNode[T]):
    """Passes ``source``'s items through, counting their tensor bytes; its state *is* the source's.

    Transparent to checkpointing: ``get_state``/``reset`` hand the source's own
    state through, so a shard's committed pipeline state is the same whether or
    not it ran under a fleet.
    """

    def __init__(self, source: BaseNode[T], meter: ShardMeter) -> None:
        super().__init__()
        self.source = source
        self.meter = meter
        meter.mix = getattr(source, "mix", None)

    @property
    def layout(self) -> Layout | None:
        """The source's own layout (``GlobalBatches.layout``), which ``produce`` takes when it cuts token rows."""
        return getattr(self.source, "layout", None)

    @property
    def mix(self) -> Any:
        """The source's ``Mix`` (None: none): ``produce`` records its control version, the meter its stats."""
        return getattr(self.source, "mix", None)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(initial_state)

    def next(self) -> T:
        started = time.perf_counter()
        item = next(self.source)
        self.meter.add_batch(time.perf_counter() - started)
        if isinstance(item, Mapping):
            self.meter.add_bytes(sum(_nbytes(v) for v in item.values()))
        return item

    def get_state(self) -> dict[str, Any]:
        return self.source.state_dict()


def _nbytes(value: object) -> int:
    """Bytes of a tensor or array, or of a ragged key's list of them."""
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of a fleet needs; shipped once to each actor."""

    ns: str
    make_pipeline: Callable[[int, int], Any]
    layout: Layout
    storage_options: Mapping[str, Any] | None
    #: what every shard's ``tgb.produce`` takes (``max_steps`` caps each shard, ``seal=False``: the stream
    #: continues, shards only close); its progress and watch are the driver's, not the workers'
    options: ProduceOptions = field(default_factory=ProduceOptions)
    #: the job's name (producer id prefix) when the namespace declares its shards; None: a namespace without
    job: str | None = None


class ShardWorker:
    """Runs shards of one fleet, one at a time (the fleet wraps it in ``ray.remote``)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self._meter: ShardMeter | None = None
        self._shard: int | None = None

    def where(self) -> str:
        """``host:pid``, for reports and logs."""
        return f"{socket.gethostname()}:{os.getpid()}"

    def progress(self) -> dict[str, float] | None:
        """The running shard's counters, or ``None`` when idle (served while ``run_shard`` runs)."""
        meter, shard = self._meter, self._shard
        if meter is None or shard is None:
            return None
        return {"shard": shard, **meter.snapshot()}

    def run_shard(self, shard: int, count: int, producer_id: str) -> ShardOutcome:
        """Produce shard ``shard`` of ``count`` under ``producer_id`` until its pipeline ends.

        Resumes where the shard's last commit left it. Errors come back as a
        ``failed``/``fenced`` outcome (with the remote traceback's message)
        rather than as an exception, so the driver can name the shard.
        """
        spec = self.spec
        # a fleet streams to trainers: one object per batch, visible at once (and metered per object), unless given
        base = spec.options.config or ProducerConfig()
        meter = ShardMeter(base.crash_hook)
        started = time.monotonic()
        self._meter, self._shard = meter, shard

        def outcome(status: str, error: BaseException | None = None, what: str = "") -> ShardOutcome:
            snap = meter.snapshot()
            text = ""
            if error is not None:
                text = what + "".join(traceback.format_exception_only(type(error), error)).strip()
            return ShardOutcome(
                shard=shard, producer_id=producer_id, status=status, appended=int(snap["appended"]),
                bytes=int(snap["bytes"]), commit_attempts=int(snap["commit_attempts"]),
                commit_successes=int(snap["commit_successes"]), elapsed_s=time.monotonic() - started,
                visibility_lag_sum_s=snap["visibility_lag_sum_s"], visibility_lag_max_s=snap["visibility_lag_max_s"],
                committed_writes=int(snap["committed_writes"]),
                error=text, error_type=type(error).__name__ if error is not None else "",
            )

        try:
            try:
                pipeline = spec.make_pipeline(shard, count)
            except Exception as e:  # noqa: BLE001 - reported to the driver, which names the shard
                return outcome("failed", e, what=f"make_pipeline({shard}, {count}) raised ")
            try:
                # a shard of a declared job: done when its pipeline ends (the last one seals), and a
                # rerun of a done shard returns at once; a namespace without declared shards: closed
                sealing = spec.job is not None and spec.options.seal is not False
                produce(
                    spec.ns, MeteredNode(pipeline, meter), producer_id=producer_id, layout=spec.layout,
                    shard=None if spec.job is None else (shard, count), job=spec.job or "fleet",
                    storage_options=spec.storage_options,
                    options=replace(spec.options, seal=None if sealing else False, progress=False,
                                    watch=meter.watching, config=replace(base, crash_hook=meter)),
                )
            except FencedError as e:
                return outcome("fenced", e)
            except Exception as e:  # noqa: BLE001 - reported to the driver, which names the shard
                return outcome("failed", e)
            return outcome("done")
        finally:
            self._meter, self._shard = None, None

