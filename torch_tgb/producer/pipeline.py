"""``produce``: run a resumable pipeline of global batches into a :class:`Producer`.

The pipeline is a ``torchdata.nodes.BaseNode`` yielding global batches
(``dict[str, Tensor]``). Each batch is appended with the pipeline's
``state_dict()`` taken right after it, so the manifest version that commits
offset ``k`` also holds the state from which offset ``k + 1`` is produced
(seed 000 §5.3). A restarted ``produce`` with the same ``producer_id`` resets
the pipeline to the state committed with its ``resume_offset``: nothing is
re-read from the start and nothing is produced twice. Offsets appended but
not committed when a process died are produced again from that state (their
objects stay invisible orphans for the Reclaimer). A pipeline that says which
control record shaped its last batch (its ``mix``'s ``control_version``:
``Mix(control=)``, forwarded by ``Pack`` and ``GlobalBatches``) has it recorded
in the batch's manifest entry.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch_tgb.lineage.sources import register_sources, sources_of
from torch_tgb.errors import ShardComplete, TGBError
from torch_tgb.manifest import JobSpec
from torch_tgb.producer._walk import pipeline_nodes, pipeline_skips
from torch_tgb.producer.config import run_config
from torch_tgb.producer.options import ProduceOptions, ProduceSettings
from torch_tgb.producer.producer import Producer
from torch_tgb.producer.stats import ProducerStats

if TYPE_CHECKING:
    import torch
    from torchdata.nodes import BaseNode
    from typing_extensions import Unpack

    from torch_tgb.layout import Layout
    from torch_tgb.storage import ObjectStore

__all__ = ["ProduceReport", "produce"]

log = logging.getLogger(__name__)

#: seconds between progress log lines when no bar is drawn (not a terminal)
LOG_EVERY_S = 30.0


@dataclass(frozen=True)
class ProduceReport:
    """What one :func:`produce` run did.

    Offsets ``start_offset .. end_offset - 1`` were appended by this run
    (``batches`` of them) and are committed. ``resumed``: an earlier run of
    this ``producer_id`` had committed offsets (``start_offset > 0``).
    ``exhausted``: the pipeline ended (``StopIteration``) rather than
    ``max_steps`` being reached. ``already_complete``: the producer's shard of
    a declared job was done before this run, which did nothing (its offsets
    are ``0 .. end_offset - 1``). ``done``: this run marked the producer done.
    ``skipped``: samples the pipeline's stages dropped, by reason (totals
    since the producer's first run: the counters travel with the committed
    state). ``interrupted``: the run ended early on ``options.stop``; the
    producer was closed with what it had appended committed.
    """

    producer_id: str
    start_offset: int
    end_offset: int
    batches: int
    seconds: float
    resumed: bool
    exhausted: bool
    sealed: bool
    bytes_written: int
    stats: ProducerStats
    already_complete: bool = False
    done: bool = False
    skipped: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0


def produce(
    ns: str | ObjectStore,
    pipeline: BaseNode[Mapping[str, torch.Tensor]],
    *,
    producer_id: str | None = None,
    layout: Layout | None = None,
    shard: tuple[int, int] | None = None,
    job: str = "job",
    storage_options: Mapping[str, Any] | None = None,
    options: ProduceOptions | None = None,
    **settings: Unpack[ProduceSettings],
) -> ProduceReport:
    """Append every batch of ``pipeline`` to ``ns`` as producer ``producer_id``, resumably.

    ``layout`` says how a batch is cut; leave it out to take the pipeline's
    (``GlobalBatches.layout``, e.g. of ``datapipes.document_batches``). A
    layout of the same cut without keys (``Layout(dp=2)``) means the
    pipeline's; one whose keys cannot cut its rows is refused.

    Opens a :class:`Producer` (fencing any older incarnation of the id), resets
    the pipeline to the state committed with its ``resume_offset`` (``None``
    for a fresh id), then appends ``next(pipeline)`` as offsets
    ``resume_offset, resume_offset + 1, ...`` with ``state=pipeline.state_dict()``
    until the pipeline ends or this producer id holds ``max_steps`` offsets in
    total (not per run). Then flushes (everything appended is committed when
    this returns) and closes the producer.

    **A job of declared shards** (``shard=(i, n)``): the namespace declares
    ``n`` shards of job ``job`` when it is created, this run is shard ``i``
    under the producer id ``f"{job}-shard{i:05d}-of{n:05d}"`` (``producer_id``
    may be left out), and the shard is marked done when its pipeline is
    exhausted -- the last shard done seals the namespace, whatever the order
    the shards ran in. ``seal=False`` says the stream continues: the shard
    closes without being marked done (a later run marks it). Rerunning a done
    shard does nothing and returns at once (``already_complete``); a shard of
    another count or job is refused (:class:`~torch_tgb.errors.JobMismatch`).
    A producer whose id belongs to the namespace's job follows the same rules.

    Without declared shards, ``seal=True`` marks the producer done, which
    seals the namespace once no other producer is still open (see
    ``Producer.close``): every producer of such a stream may pass it.
    Finishing a shard or sealing with no batch at all written by this
    producer logs a warning (an empty source, or every document dropped).

    Everything else is a :class:`~torch_tgb.producer.ProduceOptions` field
    (``commit_policy``, ``max_lag``, ``max_steps``, ``seal``, ``config``,
    ``metadata``, ``progress``, ``label``, ``expected_batches``, ``on_append``,
    ``stop``, ``codecs``), given as ``options=`` or as keyword arguments. The report's
    ``skipped`` counts the samples the pipeline's stages dropped, by reason;
    a run with skips logs a warning naming them. The counts up to each offset
    are committed with it in this producer's record of the manifest
    (``tgb inspect`` shows them per producer and in total).
    """
    from torchdata.nodes import BaseNode

    from torch_tgb._progress import progress as progress_bar
    from torch_tgb._progress import progress_enabled

    if not isinstance(pipeline, BaseNode):
        raise TypeError(f"pipeline must be a torchdata.nodes.BaseNode, got {type(pipeline).__name__}")
    o = (options or ProduceOptions()).with_settings(settings)
    max_steps, seal = o.max_steps, o.seal
    layout = _layout_of(pipeline, layout)
    spec, producer_id = _job_of(producer_id, shard, job)
    started = time.perf_counter()
    try:
        producer = Producer(
            ns, producer_id=producer_id, layout=layout, commit_policy=o.commit_policy, max_lag=o.max_lag,
            storage_options=storage_options, metadata=o.metadata, config=run_config(o.config, rate=o.rate), job=spec,
            codecs=o.codecs,
        )
    except ShardComplete as e:
        log.info("produce %s: %s", producer_id, e)
        return ProduceReport(
            producer_id=producer_id, start_offset=e.next_offset, end_offset=e.next_offset, batches=0,
            seconds=time.perf_counter() - started, resumed=e.next_offset > 0, exhausted=True, sealed=e.sealed,
            bytes_written=0, stats=ProducerStats(), already_complete=True, done=False,
        )
    with producer, (o.watch(producer) if o.watch is not None else contextlib.nullcontext()):
        found = sources_of(pipeline)
        if found:  # the sources the rows' provenance names, recorded once in the namespace
            register_sources(producer.store, found)
        start = producer.resume_offset
        if start and producer.resume_state is None:
            raise TGBError(
                f"{producer.store.url}: producer {producer_id!r} committed offsets 0..{start - 1} without a "
                "pipeline state, so produce() cannot tell where its pipeline stood; use a new producer_id "
                "or drive the Producer yourself"
            )
        offset = start
        exhausted = False
        show = progress_enabled() if o.progress is None else o.progress
        total = o.expected_batches if max_steps is None else max_steps
        total = None if total is None else max(0, total - start)
        last_log = time.monotonic()
        with progress_bar(total=total, desc=o.label or f"produce {producer_id}", unit="batch", enabled=show) as bar:
            if max_steps is None or offset < max_steps:
                pipeline.reset(producer.resume_state)
            nodes = pipeline_nodes(pipeline)  # walked once: each append commits the skips counted so far
            interval = 1.0 / o.rate if o.rate else 0.0
            next_at = time.perf_counter()
            while max_steps is None or offset < max_steps:
                if o.stop is not None and o.stop.is_set():
                    break
                try:
                    batch = next(pipeline)
                except StopIteration:
                    exhausted = True
                    break
                if interval:  # a stream's pace: at most `rate` batches per second
                    delay = max(0.0, next_at - time.perf_counter())
                    if o.stop is None:
                        time.sleep(delay)
                    elif o.stop.wait(delay):
                        break  # stopped while waiting: this batch is not appended (its state is not committed)
                    next_at = max(next_at + interval, time.perf_counter() - interval)
                # the control version that shaped the batch (Mix(control=), forwarded by Pack and GlobalBatches)
                mix = getattr(pipeline, "mix", None)
                control = 0 if mix is None else int(mix.control_version)
                producer.append(batch, offset=offset, state=pipeline.state_dict(), control=control,
                                skipped=pipeline_skips(pipeline, nodes=nodes))
                if o.on_append is not None:
                    o.on_append(offset)
                offset += 1
                bar.update(1)
                if not show and time.monotonic() - last_log >= LOG_EVERY_S:
                    last_log = time.monotonic()
                    log.info("produce %s: offset %d (%d this run, %.1f batch/s)", producer_id, offset,
                             offset - start, (offset - start) / (time.perf_counter() - started))
        producer.flush()
        interrupted = not exhausted and o.stop is not None and o.stop.is_set()
        # a shard of a declared job is done when its pipeline is exhausted (unless the stream
        # continues); without declared shards the caller says so with seal=True; never when stopped
        done = (exhausted and seal is not False) if producer.job is not None else bool(seal) and not interrupted
        if done and offset == 0:
            log.warning(
                "%s: producer %r is marked done with no batch written: its pipeline yielded nothing (an empty "
                "source, a shard with no documents, or every document dropped by packing or batching)",
                producer.store.url, producer_id,
            )
        producer.close(seal=done)
        stats = producer.stats()
        sealed = producer.sealed
    seconds = time.perf_counter() - started
    report = ProduceReport(
        producer_id=producer_id, start_offset=start, end_offset=offset, batches=offset - start, seconds=seconds,
        resumed=start > 0, exhausted=exhausted, sealed=sealed, bytes_written=stats.bytes_written, stats=stats,
        done=done, skipped=pipeline_skips(pipeline), interrupted=interrupted,
    )
    log.info("produce %s: offsets %d..%d (%d batches) in %.2f s%s", producer_id, start, offset - 1,
             report.batches, seconds, ", sealed" if sealed else ", done" if done else "")
    if report.skipped:
        log.warning("produce %s: %d samples skipped (%s): see the stages' stats() and on_error", producer_id,
                    sum(report.skipped.values()), ", ".join(f"{k} {v}" for k, v in report.skipped.items()))
    return report


def _layout_of(pipeline: object, layout: Layout | None) -> Layout:
    """``layout``, or the pipeline's own (``GlobalBatches.layout``); a layout that cannot cut its rows is refused."""
    from torch_tgb.errors import LayoutError
    from torch_tgb.layout import Layout

    own = getattr(pipeline, "layout", None)
    if layout is None:
        if not isinstance(own, Layout):
            raise TypeError("produce() needs layout=: the pipeline does not say how its batches are cut")
        return own
    if isinstance(own, Layout) and own.labels_from is not None and layout.labels_from != own.labels_from:
        if (layout.dp, layout.cp, layout.cp_order) == (own.dp, own.cp, own.cp_order) and not layout.seq_keys:
            return own  # the same cut (Layout(dp=...)): the rows' keys are the pipeline's
        raise LayoutError(
            f"layout={layout} cannot cut the pipeline's token-efficient rows (it stores {own.labels_from!r} with "
            f"the token after each row and derives labels): pass layout={own}, or leave layout out"
        )
    return layout


def _job_of(producer_id: str | None, shard: tuple[int, int] | None, job: str) -> tuple[JobSpec | None, str]:
    """(the declared job, this run's producer id) from ``produce``'s ``producer_id``/``shard``/``job``."""
    if shard is None:
        if producer_id is None:
            raise TypeError("produce() needs producer_id= or shard=(index, count)")
        return None, producer_id
    try:
        index, count = shard
    except (TypeError, ValueError):
        raise ValueError(f"shard={shard!r} must be (index, count) with 0 <= index < count") from None
    if isinstance(index, bool) or not isinstance(index, int) or not isinstance(count, int) or not 0 <= index < count:
        raise ValueError(f"shard={shard!r} must be (index, count) with 0 <= index < count")
    spec = JobSpec.sharded(job, count)
    derived = spec.producer_id(index)
    if producer_id is not None and producer_id != derived:
        raise ValueError(
            f"producer_id={producer_id!r} with shard={shard}: a shard's producer id is {derived!r} (job={job!r}); "
            "leave producer_id out, or name the job with job="
        )
    return spec, derived
