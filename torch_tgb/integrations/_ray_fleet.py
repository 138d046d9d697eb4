"""``Fleet``: a driver that runs the shards of a namespace on an elastic pool of Ray actors.

The unit of work is a shard with a stable producer id (``_shards.py``);
workers (Ray actors running :class:`~torch_tgb.integrations._worker.ShardWorker`)
claim whichever shard waits. The driver thread owns all the state:

- a worker that dies (``ray.kill``, a lost node, a crash) loses its in-flight
  shard back to the queue; Ray restarts the actor (``max_restarts``), or the
  driver starts a fresh one once those are spent;
- ``scale(n)`` adds actors, or kills surplus ones (idle first) and requeues
  their shards;
- a shard that shows no progress for ``stall_timeout_s`` goes to a fresh
  worker; the stalled attempt is awaited (``drain_timeout_s``) and, if it comes
  back, is fenced by its replacement's epoch bump.

Whoever runs a shard, it resumes at its last commit, so none of this loses or
duplicates a TGB (docs/protocol.md, exactly-once and fencing).
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from torch_tgb.errors import FleetError
from torch_tgb.integrations._fleet_metrics import FleetMonitor, ShardTally
from torch_tgb.integrations._fleet_types import FleetConfig, FleetReport, ShardOutcome
from torch_tgb.integrations._ray_connect import connect
from torch_tgb.integrations._ray_pool import Worker, WorkerPool
from torch_tgb.integrations._shards import ShardBoard, check_shard_count
from torch_tgb.integrations._worker import ShardWorker, WorkerSpec
from torch_tgb.layout import Layout
from torch_tgb.manifest import JobSpec, Manifest, seal_namespace
from torch_tgb.producer import ProduceOptions, ProduceSettings, ProducerConfig
from torch_tgb.storage import open_store

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Fleet"]

log = logging.getLogger(__name__)


class Fleet:
    """Produces every shard of ``make_pipeline`` into ``ns`` on ``num_producers`` Ray actors.

    ``make_pipeline(shard_index, shard_count)`` returns the shard's
    ``torchdata`` node of global batches; it runs inside the actors (it must be
    picklable). ``num_shards`` defaults to ``num_producers``; choose more
    shards than the most workers you will ever run, since it cannot change for
    a namespace. ``options`` (a :class:`~torch_tgb.producer.ProduceOptions`, or
    its fields as keywords: ``commit_policy``, ``max_lag``, ``config``,
    ``metadata``, ...) and ``storage_options`` go to every shard's producer;
    ``max_steps`` caps each shard's offsets. ``actor_options`` go to ``ray.remote`` (e.g.
    ``{"num_cpus": 1}``, ``runtime_env``); ``max_restarts`` is each actor's Ray
    restart budget (a worker past it is replaced by a fresh actor).
    ``address``: ``None`` (the running Ray, or ``ray.init()``), ``"local"``,
    ``"auto"`` or ``host:port`` (an unreachable one fails within
    ``config.connect_timeout_s``). The namespace declares the fleet's job
    (``num_shards`` shards of ``prefix``) when it is created; each shard is
    marked done when its pipeline ends and the last one done seals the
    namespace (``seal=False``: the stream continues, shards only close).
    ``progress``: the driver's bar on a terminal (``None``: if stderr is one),
    log lines otherwise. ``prefix`` names the job, hence the shards' producer
    ids (the same shard run by ``tgb produce --shard i/n --producer-id PREFIX``
    is the same producer). A namespace written by fleets before jobs were
    declared (shard producers, no job) is run as before, sealed at the end.
    ``producer_config=`` and ``max_steps_per_shard=`` are the older spellings
    of ``config=`` and ``max_steps=`` (a warning says so).

    ``start()``, then ``scale(n)``, ``stats()`` while it runs, ``wait()`` for
    the :class:`FleetReport`; or ``run()`` for all of it.
    """

    def __init__(
        self,
        ns: str,
        make_pipeline: Callable[[int, int], Any],
        *,
        num_producers: int,
        layout: Layout,
        num_shards: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        options: ProduceOptions | None = None,
        actor_options: Mapping[str, Any] | None = None,
        max_restarts: int = 3,
        address: str | None = None,
        prefix: str = "fleet",
        fleet: FleetConfig | None = None,
        producer_config: ProducerConfig | None = None,
        max_steps_per_shard: int | None = None,
        **settings: Unpack[ProduceSettings],
    ) -> None:
        if not isinstance(ns, str):
            raise TypeError(f"ns must be a namespace URL or path (workers open it themselves), got {type(ns).__name__}")
        if not callable(make_pipeline):
            raise TypeError(f"make_pipeline must be callable (shard_index, shard_count) -> node, got {make_pipeline!r}")
        _check_count("num_producers", num_producers)
        num_shards = num_producers if num_shards is None else num_shards
        _check_count("num_shards", num_shards)
        if max_restarts < 0:
            raise ValueError(f"max_restarts={max_restarts} must be >= 0")
        if isinstance(settings.get("config"), FleetConfig):  # the spelling before config= meant the producers'
            warnings.warn("Fleet(config=FleetConfig(...)) is now fleet=FleetConfig(...); config= is the producers' "
                          "ProducerConfig, as for tgb.produce", DeprecationWarning, stacklevel=2)
            fleet = settings.pop("config")  # type: ignore[assignment]
        legacy = {"config": producer_config, "max_steps": max_steps_per_shard}
        for old, (new, value) in zip(("producer_config", "max_steps_per_shard"), legacy.items()):
            if value is not None:
                warnings.warn(f"Fleet({old}=) is deprecated: pass {new}=", DeprecationWarning, stacklevel=2)
                settings[new] = value  # type: ignore[literal-required]  # one of the two names above
        o = (options or ProduceOptions(seal=True)).with_settings(settings)
        if not isinstance(o.commit_policy, str):
            raise TypeError("a fleet's commit_policy is a name ('dac', 'fixed:10', ...): each producer builds its own")
        self.ns = ns
        self.config = fleet or FleetConfig()
        self.options = o
        self.num_shards = num_shards
        self.layout = layout
        self.prefix = prefix
        self.seal = o.seal is not False
        self.address = address
        self.progress = o.progress
        self.storage_options = dict(storage_options or {})
        self._spec = WorkerSpec(ns, make_pipeline, layout, self.storage_options or None, o)
        self._actor_options = {"max_concurrency": 2, **dict(actor_options or {}), "max_restarts": max_restarts}
        self.max_restarts = max_restarts
        self._board = ShardBoard(prefix=prefix, count=num_shards)
        self._target = num_producers
        self._pool: WorkerPool | None = None
        self._abandoned: list[Worker] = []
        self._tally = ShardTally(self._board)
        self._monitor: FleetMonitor | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._report: FleetReport | None = None
        self._ray: Any = None
        self._owns_ray = False
        self._store: Any = None

    # --- the caller's side ------------------------------------------------------

    def start(self) -> Fleet:
        """Connect to Ray, check the namespace, start the actors and the driver thread."""
        if self._thread is not None:
            raise FleetError(f"{self.ns}: fleet {self.prefix!r} was already started")
        try:
            import ray
        except ImportError as e:
            raise ImportError("producer fleets need Ray: pip install 'torch-tgb[ray]'") from e
        self._ray = ray
        self._owns_ray = connect(ray, self.address, timeout_s=self.config.connect_timeout_s)
        try:
            self._store = store = open_store(self.ns, self.storage_options)
            manifest = Manifest(store)
            head = manifest.head()
            if head.sealed:
                raise FleetError(f"{store.url} is sealed: a fleet cannot produce into it")
            check_shard_count(head.producers, prefix=self.prefix, count=self.num_shards, where=store.url)
            self._spec = replace(self._spec, job=self._job(head, store.url))
            per_shard = self.options.max_steps
            self._monitor = FleetMonitor(
                ns=store.url, prefix=self.prefix, manifest=manifest, head=head, tally=self._tally,
                board=self._board, config=self.config, enabled=self.progress,
                total_steps=None if per_shard is None else per_shard * self.num_shards,
            )
            remote_cls = ray.remote(ShardWorker).options(**self._actor_options)
            self._pool = WorkerPool(ray, remote_cls, self._spec, prefix=self.prefix, target=self._target,
                                    retry_s=self.config.poll_interval_s)
        except BaseException:
            if self._store is not None:
                self._store.close()
            self._shutdown_ray()
            raise
        self._thread = threading.Thread(target=self._drive, name=f"tgb-fleet-{self.prefix}", daemon=True)
        self._thread.start()
        return self

    def _job(self, head: Any, where: str) -> str | None:
        """The job's name to declare (or join); ``None`` for a namespace written without declared shards."""
        ours = JobSpec.sharded(self.prefix, self.num_shards)
        if head.job is not None and head.job != ours:
            raise FleetError(f"{where}: the namespace declares {head.job.describe()}, this fleet is {ours.describe()}: "
                             "one namespace holds one job (pass its prefix and num_shards, or use a new namespace)")
        if head.job is None and head.producers:
            log.warning("%s: a namespace without declared shards (written before jobs were declared): fleet %s "
                        "runs its shards as before and seals at the end", where, self.prefix)
            return None
        return self.prefix

    def scale(self, num_producers: int) -> None:
        """Run on ``num_producers`` actors from now on (surplus ones are killed, their shards requeued)."""
        _check_count("num_producers", num_producers)
        self._target = num_producers
        if self._pool is not None:
            self._pool.scale(num_producers)

    @property
    def running(self) -> bool:
        """True from ``start()`` until every shard is done or the fleet failed (then ``wait()`` returns at once)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def num_producers(self) -> int:
        return self._target

    def actors(self, *, running: bool = False) -> list[Any]:
        """Handles of the live actors (only those running a shard with ``running=True``); for ``ray.kill`` in tests."""
        return self._pool.handles(running=running) if self._pool is not None else []

    def stats(self) -> tuple[Any, ...]:
        """Per-shard :class:`~torch_tgb.integrations.ray.ShardStats`, as of the driver's last poll."""
        return self._tally.snapshot()

    @property
    def metrics_port(self) -> int | None:
        return self._monitor.metrics_port if self._monitor is not None else None

    def wait(self, timeout: float | None = None) -> FleetReport:
        """Block until every shard is produced (and sealed); re-raises the fleet's error."""
        if self._thread is None:
            raise FleetError(f"{self.ns}: fleet {self.prefix!r} was not started")
        try:
            self._thread.join(timeout)
        except KeyboardInterrupt:
            self.stop()
            raise
        if self._thread.is_alive():
            raise TimeoutError(f"{self.ns}: fleet {self.prefix!r} still running after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._report is not None  # the thread ends with an error or a report
        return self._report

    def run(self) -> FleetReport:
        """``start()`` then ``wait()``."""
        return self.start().wait()

    def stop(self) -> None:
        """Stop early: kill the actors; what they committed stays, the rest is redone by the next run."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    # --- the driver thread --------------------------------------------------------

    def _drive(self) -> None:
        assert self._monitor is not None and self._pool is not None
        pool = self._pool
        try:
            while not self._board.all_done:
                if self._stop.is_set():
                    raise FleetError(f"{self.ns}: fleet {self.prefix!r} stopped with "
                                     f"{self._board.count - self._board.done} shards unfinished")
                for busy in pool.apply_scale():
                    self._release(busy, reason="removed by scale()")
                self._assign()
                self._collect(self.config.poll_interval_s)
                self._poll_progress()
                self._monitor.tick()
            self._drain()
            sealed = self._sealed()
            self._report = self._monitor.report(workers=len(pool.workers), sealed=sealed)
            log.info("fleet %s", self._report.summary())
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            self._error = e
        finally:
            for w in pool.workers + self._abandoned:
                pool.kill(w)
            self._monitor.close()
            self._store.close()
            self._shutdown_ray()

    def _release(self, worker: Worker, *, reason: str) -> None:
        shard = worker.shard
        assert shard is not None
        log.info("fleet %s: shard %d (%s) leaves %s: %s", self.prefix, shard, self._board.producer_id(shard),
                 worker.name, reason)
        self._board.requeue(shard)
        self._tally.detached(shard, died=False)
        self._tally.reassigned += 1
        worker.shard = worker.ref = worker.progress_ref = None

    def _assign(self) -> None:
        assert self._pool is not None
        self._pool.send_probes()
        for w in self._pool.workers:
            if w.ready:
                shard = self._board.claim(w.name)
                if shard is None:
                    return
                w.shard, w.last_progress, w.last_change = shard, (), None
                w.ref = w.handle.run_shard.remote(shard, self._board.count, self._board.producer_id(shard))
                self._tally.started(shard, w.name)

    def _collect(self, timeout: float) -> None:
        assert self._pool is not None
        by_ref = {w.ref: w for w in self._pool.workers + self._abandoned if w.ref is not None}
        probes = self._pool.probes()
        if not by_ref and not probes:
            time.sleep(timeout)
            return
        ready, _ = self._ray.wait([*by_ref, *probes], num_returns=len(by_ref) + len(probes), timeout=timeout)
        for ref in ready:
            if ref in probes:
                self._pool.probed(probes[ref])
                continue
            worker = by_ref[ref]
            try:
                outcome: ShardOutcome | None = self._ray.get(ref)
            except self._ray.exceptions.RayError as e:
                outcome = None
                died = e
            if worker in self._abandoned:
                self._abandoned.remove(worker)
                self._tally.abandoned_ended(worker.shard or 0, outcome)
                self._pool.kill(worker)
                continue
            shard = worker.shard
            assert shard is not None
            worker.ref = worker.progress_ref = None
            if outcome is None:
                self._worker_died(worker, died)
                continue
            worker.shard = None
            self._tally.ended(outcome)
            if outcome.status == "done":
                self._board.finish(shard)
            elif outcome.status == "fenced":
                raise FleetError(
                    f"{self.ns}: shard {shard} producer {outcome.producer_id!r} was fenced by an incarnation "
                    f"outside this fleet (is another fleet with prefix {self.prefix!r} running?): {outcome.error}"
                )
            else:
                raise FleetError(
                    f"{self.ns}: shard {shard} producer {outcome.producer_id!r} failed on {worker.name}: "
                    f"{outcome.error}"
                )

    def _worker_died(self, worker: Worker, error: BaseException) -> None:
        shard = worker.shard
        assert shard is not None
        worker.shard = None
        worker.deaths += 1
        self._tally.detached(shard, died=True)
        pid = self._board.producer_id(shard)
        log.warning("fleet %s: worker %s died running shard %d (%s): %s; requeued", self.prefix, worker.name,
                    shard, pid, type(error).__name__)
        self._board.requeue(shard)
        if self._board.attempts(shard) >= self.config.max_shard_attempts:
            raise FleetError(
                f"{self.ns}: shard {shard} producer {pid!r}: its worker died {self._board.attempts(shard)} times "
                f"(max_shard_attempts={self.config.max_shard_attempts}); last: {error}"
            ) from error
        assert self._pool is not None
        if worker.deaths > self.max_restarts:  # Ray will not restart it again: a fresh actor takes its place
            self._pool.replace(worker)
        else:
            self._pool.probe_later(worker)

    def _poll_progress(self) -> None:
        assert self._pool is not None
        now = time.monotonic()
        for w in list(self._pool.workers):
            if w.shard is None:
                continue
            if w.progress_ref is None:
                w.progress_ref = w.handle.progress.remote()
                continue
            ready, _ = self._ray.wait([w.progress_ref], timeout=0)
            if ready:
                try:
                    snap = self._ray.get(w.progress_ref)
                except self._ray.exceptions.RayError:
                    snap = None
                w.progress_ref = None
                if snap is not None and int(snap["shard"]) == w.shard:
                    self._tally.live(w.shard, snap)
                    key = (snap["appended"], snap["bytes"], snap["commit_attempts"])
                    if key != w.last_progress or w.last_change is None:
                        w.last_progress, w.last_change = key, now
            # the clock starts at the attempt's first report: starting an actor may take long
            stall = self.config.stall_timeout_s
            if stall is not None and w.last_change is not None and now - w.last_change > stall:
                self._abandon(w)

    def _abandon(self, worker: Worker) -> None:
        shard = worker.shard
        assert shard is not None
        log.warning("fleet %s: shard %d (%s) made no progress on %s for %.0f s; giving it to a fresh worker "
                    "(the stalled one is fenced if it comes back)", self.prefix, shard,
                    self._board.producer_id(shard), worker.name, self.config.stall_timeout_s)
        assert self._pool is not None
        self._pool.remove(worker)
        self._board.requeue(shard)
        self._tally.detached(shard, died=False)
        self._tally.reassigned += 1
        worker.progress_ref = None
        self._abandoned.append(worker)  # keeps .shard and .ref: its outcome is still collected

    def _drain(self) -> None:
        deadline = time.monotonic() + self.config.drain_timeout_s
        while self._abandoned and time.monotonic() < deadline:
            self._collect(self.config.poll_interval_s)
        for w in self._abandoned:
            log.warning("fleet %s: stalled worker %s (shard %s) did not come back; killed", self.prefix, w.name,
                        w.shard)

    def _sealed(self) -> bool:
        """Whether the namespace is sealed now that every shard returned.

        A job of declared shards sealed itself with its last shard's done mark
        (unless ``seal=False``). A namespace without declared shards (written
        before jobs existed) is sealed here as before: every shard is produced,
        though a shard's producer that died after its last commit is still
        marked open (its mark never landed), which the fleet knows is finished.
        """
        store = open_store(self.ns, self.storage_options or None)
        try:
            manifest = Manifest(store)
            head = manifest.head()
            if head.sealed or not self.seal or head.job is not None:
                return head.sealed
            seal_namespace(manifest, force=True)
            return True
        finally:
            store.close()

    def _shutdown_ray(self) -> None:
        if self._owns_ray and self._ray is not None:
            self._ray.shutdown()
            self._owns_ray = False


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be an int >= 1")
