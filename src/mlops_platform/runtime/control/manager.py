"""The manager: shared cache, controllers, leader election, probes and metrics, graceful shutdown.

Contract (controller-runtime ``manager``):
- ``run()`` starts the probe and metrics endpoints, the informers of every registered controller,
  and waits for the caches to sync (``cache_sync_timeout`` -> :class:`~.cache.CacheSyncTimeout`
  naming the resources). Caches run on standby replicas too, so a new leader starts warm.
- Without leader election the controllers start at once. With it, they start when this replica
  acquires the Lease and stop when it loses it; losing leadership ends ``run()`` with
  :class:`LeadershipLost` (the process should exit and be restarted, like controller-runtime).
- With ``shards > 1`` the shard coordinator (:mod:`~mlops_platform.runtime.control.sharding`, one
  Lease per partition, named after ``leader_election_id``) replaces the single election: the
  controllers run at once, each reconciling only the partitions this replica holds (their
  ``ownership`` filter); losing a partition is not fatal, it is given up and may be taken again.
  The cache's scoped resources (``Cache.restrict(..., scoped=True)``) hold only the children of
  the partitions held, and the controllers' primary kinds only the partitions' primary objects
  (their bucket label kept by a :class:`~.labeler.BucketLabeler` per kind): a replica holding
  none caches neither.
- ``/healthz`` answers 200 while the manager runs; ``/readyz`` 200 only when the caches have synced
  (informers of optional kinds never count: a missing CRD never makes the operator unready)
  and, with leader election on, this replica leads; a shard replica holding no partition is ready
  (a standby); ``/metrics`` serves the Prometheus registry.
- ``stop()`` (or SIGTERM via :meth:`run_until_signal`): stop taking work, let in-flight reconciles
  finish within ``graceful_shutdown_timeout``, release the Lease(s), stop informers and servers.

The endpoints live in :mod:`~.endpoints`, the wiring of a shard replica in :mod:`~.shardsetup`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import crdwatch
from mlops_platform.runtime.control import builder as rbuilder
from mlops_platform.runtime.control import controller as rcontroller
from mlops_platform.runtime.control import endpoints, heap, labeler, leaderelection, sharding, shardsetup
from mlops_platform.runtime.observability import events
from mlops_platform.runtime.observability import metrics as rmetrics
from mlops_platform.runtime.transport import client as rclient

log = logging.getLogger("mlops_platform.runtime.control.manager")


class LeadershipLost(RuntimeError):
    pass


@dataclasses.dataclass
class Options:
    #: watch only this namespace (None: all namespaces)
    namespace: str | None = None
    leader_election: bool = False
    leader_election_id: str = ""
    leader_election_namespace: str = "default"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    identity: str = dataclasses.field(default_factory=lambda: f"{socket.gethostname()}_{os.getpid()}")
    #: (host, port) of /healthz and /readyz; port 0 picks a free port; None disables
    health_probe_address: tuple[str, int] | None = ("127.0.0.1", 8081)
    #: (host, port) of /metrics; None disables
    metrics_address: tuple[str, int] | None = ("127.0.0.1", 8080)
    cache_sync_timeout: float = 120.0
    graceful_shutdown_timeout: float = 30.0
    resync_period: float = 10 * 3600.0
    #: /readyz needs leadership when leader election is on (standbys report not ready)
    readiness_requires_leadership: bool = True
    #: after the first cache sync, move every object alive then (the cache, mostly) out of the
    #: garbage collector's generations (``gc.freeze``): later full collections scan only what came
    #: after, instead of pausing for the whole cache (0.3 s at 5,000 InferenceServices). For a
    #: process that runs one manager (the CLI turns it on); not for one hosting many (tests).
    #: Then every ``heap_check_period`` seconds, once no controller has had work for
    #: ``heap_quiet_seconds``, the heap is frozen again if what came after has outgrown it
    #: (``heap.HeapKeeper.refreeze_due``)
    gc_freeze_after_sync: bool = False
    heap_check_period: float = 5.0
    heap_quiet_seconds: float = 5.0
    #: partitions of the primary objects (1: no sharding); > 1: one Lease per partition instead of
    #: leader election, each replica reconciling its fair share (see ``sharding``)
    shards: int = 1
    #: with ``shards > 1``: hold exactly this partition (active/standby) instead of a fair share
    shard_id: int | None = None

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"shards must be >= 1, got {self.shards}")
        if self.shard_id is not None and not (self.shards > 1 and 0 <= self.shard_id < self.shards):
            raise ValueError(
                f"shard_id needs shards > 1 and must be in [0, {self.shards}), got {self.shard_id}"
            )


class Manager:
    """Runs controllers on one shared cache: controller-runtime's ``manager.Manager``.

    ``Manager(client, Options(...))`` ~ ``ctrl.NewManager(cfg, manager.Options{...})``
    (:class:`Options` maps to ``Cache.DefaultNamespaces``, ``LeaderElection*``,
    ``HealthProbeBindAddress``, ``Metrics.BindAddress``, ``GracefulShutdownTimeout``,
    ``Cache.SyncPeriod``); :meth:`builder` ~ ``ctrl.NewControllerManagedBy(mgr)``; :meth:`add` ~
    ``mgr.Add(runnable)``; :meth:`event_recorder` ~ ``mgr.GetEventRecorderFor(name)``; ``cache`` ~
    ``mgr.GetCache()``; :meth:`run` ~ ``mgr.Start(ctx)`` and :meth:`run_until_signal` ~
    ``mgr.Start(ctrl.SetupSignalHandler())``; :meth:`stop` ~ cancelling that context;
    :meth:`is_ready` is the ``/readyz`` check (``mgr.AddReadyzCheck``).
    """

    def __init__(self, client: rclient.Client, options: Options | None = None) -> None:
        self.client = client
        self.options = options or Options()
        self.metrics = rmetrics.Metrics()
        self.metrics.observe_client(client)
        self.cache = rcache.Cache(
            client, namespace=self.options.namespace, resync_period=self.options.resync_period
        )
        self.metrics.observe_cache(self._cache_sizes)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop run() runs in
        self.metrics.observe_runtime(self._tasks, lambda: client.watches_open)
        #: optional kinds (CRDs that may come and go), shared by every controller of this manager
        self.optional_kinds = crdwatch.OptionalKinds(self.cache)
        self.controllers: list[rcontroller.Controller] = []
        self.elector: leaderelection.LeaderElector | None = None
        #: with ``shards > 1``, once running: the partitions this replica holds and why
        self.shards: sharding.ShardCoordinator | None = None
        #: with ``shards > 1``: the bucket labelers of the primary kinds
        self.labelers: list[labeler.BucketLabeler] = []
        self._stop = asyncio.Event()
        #: set when :meth:`_lead` has stopped the controllers (every in-flight reconcile ended)
        self._drained = asyncio.Event()
        self._endpoints: endpoints.Endpoints | None = None  # /healthz, /readyz, /metrics while running
        self._synced = False
        self._recorders: list[events.EventRecorder] = []
        self._ready_checks: dict[str, Callable[[], bool]] = {}
        #: times every garbage collection while running; freezes the heap (gc_freeze_after_sync)
        self.heap = heap.HeapKeeper(
            self.metrics.registry,
            objects=lambda: sum(self._cache_sizes().values()),
            writes=lambda: sum(inf.store.writes for inf in self.cache.informers),
        )

    def _cache_sizes(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for inf in self.cache.informers:
            sizes[inf.resource.group_resource] = sizes.get(inf.resource.group_resource, 0) + len(inf.store)
        return sizes

    def _tasks(self) -> int | None:
        return None if self._loop is None else len(asyncio.all_tasks(self._loop))

    # -- registration -------------------------------------------------------------------------------

    def builder(self, name: str) -> rbuilder.Builder:
        """A controller builder bound to this manager's cache and metrics; pass the result to add()."""
        return rbuilder.Builder(name, self.cache, self.metrics, self.optional_kinds)

    def add(self, ctrl: rcontroller.Controller) -> None:
        self.controllers.append(ctrl)

    def event_recorder(
        self, component: str, *, correlation_annotation: str | None = None
    ) -> events.EventRecorder:
        """An Event recorder for ``component``, started and flushed with the manager (with
        ``correlation_annotation``, Events carry the recording reconcile's id in it)."""
        rec = events.EventRecorder(
            self.client, component, self.options.identity, correlation_annotation=correlation_annotation
        )
        self._recorders.append(rec)
        return rec

    # -- probes ---------------------------------------------------------------------------------------

    def add_readyz_check(self, name: str, check: Callable[[], bool]) -> None:
        """Another condition of ``/readyz`` (``mgr.AddReadyzCheck``), e.g. a webhook serving."""
        self._ready_checks[name] = check

    def is_ready(self) -> bool:
        if not (self._synced and self.cache.has_synced()):
            return False
        if not all(check() for check in self._ready_checks.values()):
            return False
        if self.options.shards > 1:
            return True  # with no partition held, a standby
        if self.options.leader_election and self.options.readiness_requires_leadership:
            return self.elector is not None and self.elector.is_leader()
        return True

    @property
    def health_port(self) -> int | None:
        return self._endpoints.health_port if self._endpoints else None

    @property
    def metrics_port(self) -> int | None:
        return self._endpoints.metrics_port if self._endpoints else None

    # -- lifecycle ----------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    async def run_until_signal(self) -> None:
        """run() with SIGTERM/SIGINT mapped to a graceful stop, and SIGUSR1 to a full resync now
        (every informer replays its cache to the controllers, as the resync period does: what a
        resync costs can be measured, and an operator nudged, without waiting hours)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGUSR1, self._resync_now)
        try:
            await self.run()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                loop.remove_signal_handler(sig)

    def _resync_now(self) -> None:
        log.info("resync requested (SIGUSR1)")
        self.cache.resync()

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        o = self.options
        self._endpoints = endpoints.Endpoints(
            self.is_ready, self.metrics.registry, o.health_probe_address, o.metrics_address
        )
        await self._endpoints.start()
        for rec in self._recorders:
            rec.start()
        keeper: asyncio.Task[None] | None = None
        try:
            self.heap.install()
            # before the first event: nothing is owned until a partition is acquired
            shards = self._setup_shards() if self.options.shards > 1 else None
            if shards is not None:  # scoped informers list no child until a partition is held
                await self.cache.set_scope(shards.scope_selector())
            self.cache.start()
            log.info(
                "waiting for caches to sync",
                extra={"resources": [i.resource.group_resource for i in self.cache.informers]},
            )
            try:
                await self._until_stopped(self.cache.wait_for_sync(self.options.cache_sync_timeout))
                if not self._stop.is_set():  # a stop ends the wait too: the caches may not be synced
                    log.info("caches synced")
            except rcache.CacheSyncTimeout as e:
                # A secondary kind that cannot be listed (RBAC, missing CRD) must not hide the failure
                # in a log: controllers whose primary kind is synced start, and report it on their
                # objects. Without the primary kind there is nothing to report on: fail.
                if not all(self.cache.informer_for(c.primary).has_synced() for c in self.controllers):
                    raise
                log.error(
                    "starting degraded: %s",
                    e,
                    extra={"errors": {k: str(v) for k, v in self.cache.errors().items()}},
                )
            if self._stop.is_set():
                return
            self._synced = True
            if self.options.gc_freeze_after_sync:
                self.heap.freeze()
                keeper = asyncio.create_task(self._keep_heap(), name="heap")
            if shards is not None:
                await self._run_sharded(shards)
            elif self.options.leader_election:
                await self._run_elected()
            else:
                await self._lead()
        finally:
            if keeper is not None:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
            self.heap.remove()
            for rec in self._recorders:
                await rec.stop()
            await self.cache.stop()
            await self.optional_kinds.stop()
            await self._endpoints.stop()
            log.info("manager stopped")

    async def _until_stopped(self, aw: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(aw)
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()
        finally:
            stopper.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run_elected(self) -> None:
        o = self.options
        if not o.leader_election_id:
            raise ValueError("leader election needs leader_election_id")
        config = leaderelection.LeaderElectionConfig(
            namespace=o.leader_election_namespace,
            name=o.leader_election_id,
            identity=o.identity,
            lease_duration=o.lease_duration,
            renew_deadline=o.renew_deadline,
            retry_period=o.retry_period,
            release_on_cancel=True,
        )
        self.elector = leaderelection.LeaderElector(self.client, config, registry=self.metrics.registry)
        elector = self.elector
        watcher = asyncio.create_task(self._stop.wait())
        self._drained.clear()
        election = asyncio.create_task(elector.run(self._lead))
        await asyncio.wait({watcher, election}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            # controller-runtime's order: the controllers drain (the stop ends _lead's wait; in-flight
            # reconciles finish) while the Lease is still held and renewed, and only then is it
            # released. Stopping the elector first cancelled _lead mid-drain: the Lease was released
            # while reconciles still wrote, so a standby could take over and write at the same time
            # (seen in the API server's audit log: tests/reliability/test_leader_failover.py).
            if elector.is_leader():
                drained = asyncio.create_task(self._drained.wait())
                await asyncio.wait(
                    {drained, election}, timeout=o.graceful_shutdown_timeout + 5.0,
                    return_when=asyncio.FIRST_COMPLETED,
                )  # fmt: skip
                drained.cancel()
            elector.stop()  # releases the Lease (cancels _lead if it has not ended)
            await election
            return
        watcher.cancel()
        election.result()  # re-raise errors of the leader's work
        raise LeadershipLost(f"lost the Lease {o.leader_election_namespace}/{o.leader_election_id}")

    def _setup_shards(self) -> sharding.ShardCoordinator:
        self.shards, self.labelers = shardsetup.setup(
            self.client, self.options, self.cache, self.controllers, self.metrics.registry
        )
        return self.shards

    async def _run_sharded(self, coordinator: sharding.ShardCoordinator) -> None:
        o = self.options
        lead = asyncio.create_task(self._lead())  # workers run always; the filter gates them
        for lab in self.labelers:
            lab.start()
        shards = asyncio.create_task(coordinator.run(), name="shards")
        watcher = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({watcher, shards}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            coordinator.stop()  # gives every partition up (in-flight reconciles end) and releases
            await asyncio.wait({shards}, timeout=o.graceful_shutdown_timeout)
            if not shards.done():  # a reconcile that never ends: its Leases expire instead
                shards.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await shards
            self._stop.set()  # the coordinator failing ends the manager too
            await lead
            for lab in self.labelers:
                await lab.stop()
        if not shards.cancelled():
            shards.result()  # re-raise the coordinator's error

    async def _keep_heap(self) -> None:
        """Freeze the heap again when it has outgrown the last freeze, once no controller has had
        work for a while (the refreeze is one full collection: its pause should meet no reconcile,
        and a busy spell is likely to go on)."""
        o = self.options
        while True:
            await asyncio.sleep(o.heap_check_period)  # a period, not a wait for a state
            quiet = all(c.queue.idle_for() >= o.heap_quiet_seconds for c in self.controllers)
            if quiet and self.heap.refreeze_due():
                self.heap.refreeze()

    async def _lead(self) -> None:
        """Run the controllers until stopped (or cancelled because leadership ended)."""
        log.info("starting controllers", extra={"controllers": [c.name for c in self.controllers]})
        for c in self.controllers:
            c.start()
        try:
            await self._stop.wait()
        finally:
            timeout = self.options.graceful_shutdown_timeout
            await asyncio.shield(asyncio.gather(*(c.stop(timeout) for c in self.controllers)))
            log.info("controllers stopped")
            self._drained.set()
