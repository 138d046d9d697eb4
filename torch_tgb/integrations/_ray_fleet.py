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
  back, is fenced by its replacement's epoch bump;
- with ``FleetConfig(autoscale=(min, max))`` an :class:`~torch_tgb.integrations._scaler.Autoscaler`
  sets the pool's size every round from the trainer's stall, the lead, ``max_lag``
  pauses and the mixture ahead (``_autoscale.py``: the pure policy).

Whoever runs a shard, it resumes at its last commit, so none of this loses or
duplicates a TGB (docs/protocol.md, exactly-once and fencing).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

from torch_tgb.errors import FleetError
from torch_tgb.integrations._allocation import groups_to_add
from torch_tgb.integrations._fleet_driver import FleetDriver
from torch_tgb.integrations._fleet_metrics import FleetMonitor, ShardTally
from torch_tgb.integrations._fleet_types import FleetConfig, FleetReport, ShardStats
from torch_tgb.integrations._plan_record import record_plan
from torch_tgb.integrations._ray_connect import connect
from torch_tgb.integrations._partition import PartitionPlan
from torch_tgb.integrations._ray_pool import ActorClass, ShardActor, WorkerPool
from torch_tgb.integrations._scaler import Autoscaler
from torch_tgb.integrations._shard_plan import check_plan, group_sizes, shares
from torch_tgb.integrations._shards import ShardBoard, check_shard_count
from torch_tgb.integrations._worker import ShardWorker, WorkerSpec
from torch_tgb.layout import Layout
from torch_tgb.manifest import ControlChannel, JobSpec, Manifest, ManifestState, seal_namespace
from torch_tgb.producer import ProduceOptions, ProducerConfig, ProduceSettings
from torch_tgb.storage import ObjectStore, open_store

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
        plan = fleet.plan if fleet is not None else None
        num_shards = (num_producers if plan is None else plan.num_shards) if num_shards is None else num_shards
        _check_count("num_shards", num_shards)
        if plan is not None:
            check_plan(plan, num_shards=num_shards, where=f"{ns}: fleet {prefix!r}")
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
        self.plan = self.config.plan
        self._board = ShardBoard(prefix=prefix, count=num_shards,
                                 groups=None if self.plan is None else self.plan.shard_groups())
        policy = self.config.policy
        # autoscaling starts from num_producers, inside the policy's bounds (and the shards there are)
        self._target = num_producers if policy is None else min(max(num_producers, policy.bounds(num_shards)[0]),
                                                                  policy.bounds(num_shards)[1])
        self._scaler: Autoscaler | None = None
        self._pool: WorkerPool | None = None
        self._driver: FleetDriver | None = None
        self._tally = ShardTally(self._board)
        self._monitor: FleetMonitor | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._report: FleetReport | None = None
        self._ray: ModuleType | None = None
        self._owns_ray = False
        self._store: ObjectStore | None = None

    # --- the caller's side ------------------------------------------------------

    def start(self) -> Fleet:
        """Connect to Ray, check the namespace, start the actors and the driver thread."""
        if self._thread is not None:
            raise FleetError(f"{self.ns}: fleet {self.prefix!r} was already started")
        try:
            import ray as ray_module
        except ImportError as e:
            raise ImportError("producer fleets need Ray: pip install 'torch-tgb[ray]'") from e
        # Ray's stubs type ray.remote(cls).options(...).remote() as ActorHandle | type: the calls
        # made on the module are checked against ActorClass and ShardActor (_ray_pool.py) instead.
        ray: ModuleType = ray_module
        self._ray = ray
        self._owns_ray = connect(ray, self.address, timeout_s=self.config.connect_timeout_s)
        try:
            self._store = store = open_store(self.ns, self.storage_options)
            manifest = Manifest(store)
            head = manifest.head()
            if head.sealed:
                raise FleetError(f"{store.url} is sealed: a fleet cannot produce into it")
            check_shard_count(head.producers, prefix=self.prefix, count=self.num_shards, where=store.url)
            if self.plan is not None:  # the namespace's plan from now on; a different recorded one is refused
                record_plan(store, self.prefix, self.plan)
            self._spec = replace(self._spec, job=self._job(head, store.url))
            per_shard = self.options.max_steps
            self._monitor = FleetMonitor(
                ns=store.url, prefix=self.prefix, manifest=manifest, head=head, tally=self._tally,
                board=self._board, config=self.config, enabled=self.progress,
                total_steps=None if per_shard is None else per_shard * self.num_shards,
            )
            remote_cls: ActorClass = ray.remote(ShardWorker).options(**self._actor_options)
            self._pool = WorkerPool(ray, remote_cls, self._spec, prefix=self.prefix, target=self._target,
                                    retry_s=self.config.poll_interval_s)
            if self.plan is not None:  # each group's planned workers, scaled to the pool
                self._pool.scale(self._target, groups=self.plan.initial_groups(self._target))
            policy = self.config.policy
            if policy is not None:
                c, plan, board = self.config, self.plan, self._board
                self._scaler = Autoscaler(policy, self._pool, self._tally, shards=self.num_shards, manifest=manifest,
                                          channel=ControlChannel(store), interval_s=c.autoscale_interval_s,
                                          stale_s=c.trainer_stale_s, sources=c.sources,
                                          pod_memory_bytes=c.pod_memory_bytes, plan=plan,
                                          runnable=None if plan is None else lambda: board.runnable(len(plan.groups)))
            self._driver = FleetDriver(ray, self._pool, self._board, self._tally, self._monitor, self.config,
                                       ns=self.ns, prefix=self.prefix, max_restarts=self.max_restarts,
                                       scaler=self._scaler)
        except BaseException:
            if self._store is not None:
                self._store.close()
            self._shutdown_ray()
            raise
        self._thread = threading.Thread(target=self._drive, name=f"tgb-fleet-{self.prefix}", daemon=True)
        self._thread.start()
        return self

    def _job(self, head: ManifestState, where: str) -> str | None:
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
            plan, groups = self.plan, self._pool.groups()
            if plan is None or num_producers <= len(groups):
                self._pool.scale(num_producers)
                return
            add = groups_to_add(num_producers - len(groups), shares=shares(plan, plan.weights),
                                actors=group_sizes(groups, len(plan.groups)), runnable=list(plan.shards))
            self._pool.scale(num_producers, groups=add)

    @property
    def running(self) -> bool:
        """True from ``start()`` until every shard is done or the fleet failed (then ``wait()`` returns at once)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def num_producers(self) -> int:
        """The actors wanted now (an autoscaling fleet's current target)."""
        return self._pool.target if self._pool is not None else self._target

    def partition(self) -> PartitionPlan | None:
        """An autoscaling fleet's source partition (seed 004 §5.1) from what its shards measured so far."""
        return self._scaler.partition() if self._scaler is not None else None

    def assignments(self) -> list[tuple[str, int | None, int | None]]:
        """``(actor, source group, shard)`` of every live actor (group None: undedicated; shard None: idle)."""
        return self._pool.assignments() if self._pool is not None else []

    def actors(self, *, running: bool = False) -> list[ShardActor]:
        """Handles of the live actors (only those running a shard with ``running=True``); for ``ray.kill`` in tests."""
        return self._pool.handles(running=running) if self._pool is not None else []

    def stats(self) -> tuple[ShardStats, ...]:
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
        assert self._driver is not None and self._monitor is not None and self._pool is not None
        try:
            self._driver.run(self._stop)
            sealed = self._sealed()
            self._report = self._monitor.report(workers=len(self._pool.workers), sealed=sealed)
            if self._scaler is not None:
                self._report = replace(self._report, autoscale=tuple(self._scaler.events),
                                       timeline=tuple(self._scaler.timeline), partition=self._scaler.partition())
            if self.plan is not None:
                self._report = replace(self._report, plan=self.plan)
            log.info("fleet %s", self._report.summary())
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            self._error = e
        finally:
            self._driver.kill_all()
            self._monitor.close()
            if self._store is not None:
                self._store.close()
            self._shutdown_ray()

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
