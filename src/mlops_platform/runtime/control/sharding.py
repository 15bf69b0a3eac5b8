"""Sharding: each replica reconciles a stable hash partition of the primary objects, every partition
behind its own Lease, so partitions fail over one by one and reconciling scales past one process.
Kubernetes stays the distributed engine: Leases, written by client-go's election protocol
(:class:`~mlops_platform.runtime.control.leaderelection.LeaderElector`), are the only coordination.
This module holds the coordinator, one per replica; its parts live next to it:
:mod:`~.partitioning` (buckets, partitions, the fair-share plan: pure), :mod:`~.shardgroup` (the
configuration, the Leases' labels, the view of the group), :mod:`~.partitionleases` (one elector
per partition, holding and giving up) and :mod:`~.shardmembership` (the member Lease: joining and
leaving).

Contract (one :class:`ShardCoordinator` per replica; replicas of a group share ``group``, the
Lease namespace and the partition count ``P``, and have distinct identities):

- **Partitions.** A request's partition is the SHA-256 bucket of ``namespace/name`` modulo ``P``
  (:func:`~.partitioning.partition_of`, ``P <= 256``). Children map to their owner's request before
  this (the controller's owner mapper), so they land in their owner's partition.
- **Scoped caches.** Children carry their owner's bucket as label :data:`BUCKET_LABEL` (the
  controller puts it there; a bucket never changes with ``P``, so changing ``P`` relabels nothing).
  With a ``scope`` (the manager's cache), the coordinator narrows the scoped informers to the
  buckets of the partitions it holds (:func:`~.partitioning.partition_selector`): a replica lists,
  watches, decodes and stores only its own partitions' children, not every replica all of them.
  Acquiring ``k`` first lists ``k``'s children (only theirs: :meth:`~.cache.Cache.set_scope` with
  ``adding``, within ``sync_timeout``), then starts reconciling it; giving ``k`` up narrows again
  after the drain. The primary objects are narrowed the same way (the manager scopes the
  controllers' primary kinds): they carry the label too, put there by a
  :class:`~.labeler.BucketLabeler`, and the hash of their name stays the truth (a missing or wrong
  label delays an object until it is labelled, never moves it). A partition whose holder has not
  renewed for 2.5 retry periods (likely dead: live holders renew every period) is listed ahead by
  the replica the matching would give it to without that holder, so the takeover after expiry does
  not wait for the LIST; it is dropped again if the holder renews.
- **Partition Leases** (:mod:`~.partitionleases`). Partition ``k`` is guarded by Lease
  ``<group>-shard-<k>``, read from the group's watch in dynamic mode. A replica reconciles ``k``
  only while its elector for that Lease leads. To give ``k`` up (rebalance, stop) it first stops
  admitting ``k``'s requests (queued ones are skipped when dequeued), waits until the in-flight
  reconciles of ``k`` have ended, and only then releases the Lease. When no renewal succeeds within
  ``renew_deadline`` the elector ends leadership and ``k`` is given up the same way. So two
  replicas never reconcile the same object at once, under client-go's own assumption: a holder
  stops within ``renew_deadline``, before its Lease expires for the others
  (``renew_deadline < lease_duration``), and its in-flight reconciles end in the time left.
- **Membership** (dynamic mode, ``shard_id=None``). Each replica also holds the member Lease
  ``<group>-member-<identity>``, renewed every :attr:`~.shardgroup.ShardConfig.member_retry_period`
  (a third of the lease duration, at most half the renew deadline: membership only sizes the fair
  share, the partition Leases guard the writes). Every Lease of the group carries the label
  ``mlops.platform/shard-group=<group>``; one informer (LIST + WATCH with that selector) is this
  replica's :class:`~.shardgroup.LeaseView` (liveness by the local clock, :mod:`~.shardgroup`).
- **Fair share.** A replica aims at ``ceil(P / live members)`` partitions
  (:func:`~.partitioning.plan`). Its elector of every partition keeps observing that Lease (so an
  expiry is seen on time), but may write an acquisition only for a free partition the rendezvous
  matching gives this replica (the highest ``rank(member, k)`` among members under their share);
  other acquisitions are refused before they reach the API server (the elector's "error updating
  lease" line for them is demoted to debug). A replica beyond its share gives up its lowest-ranked
  partitions. Replicas whose views agree thus agree on who takes what: 3 replicas and ``P=3`` end
  with one each. A killed replica's partitions are free once its Leases expire: another replica
  takes each within ``lease_duration`` plus two acquire intervals at worst (one to see the last
  renewal, one to retry: ``2 * 2.2 * retry_period``).
- **Mixed partition counts.** Member Leases announce ``P`` (annotation ``mlops.platform/shards``).
  While a live member announces another ``P`` (a rollout changing ``--shards``) this replica holds
  nothing: two partitionings would put one object in two partitions. Change ``P`` by scaling to zero.
- **Static mode** (``shard_id=i``): only partition ``i``, always campaigned for, no member Lease; two
  replicas with the same ``i`` are active/standby for it.
- **Join and leave.** A replica campaigns once its member Lease is held and it has watched the group
  for two member retry periods (it has seen every live member renew; replicas started together see
  each other first). :meth:`~ShardCoordinator.stop` gives every partition up as above (stops reconciling,
  drains), releases and deletes the member Lease, then releases the partitions' Leases.
- **Targets** (the controllers, :class:`Target`): on acquiring ``k`` (after the scope re-list) the
  coordinator calls
  ``enqueue_all(where=in k)``; on giving ``k`` up it awaits ``wait_idle(in k)``. The controllers
  filter their events and dequeued items with :meth:`ShardCoordinator.owns`.
- **Metrics** (no controller-runtime names exist for this, hence the prefix):
  ``mlops_platform_shard_partitions_held``, ``mlops_platform_shard_partition_held{partition}`` (0/1),
  ``mlops_platform_shard_members`` (live members seen, this one included); each Lease also has its
  ``leader_election_master_status{name}``. One JSON log line per acquisition and per giving up, with
  ``partition``, ``lease`` and ``reason``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from mlops_platform.runtime import rbac
from mlops_platform.runtime.caching import informer as rinformer
from mlops_platform.runtime.clock import Clock, RealClock
from mlops_platform.runtime.control import (
    leaderelection,
    partitioning,
    partitionleases,
    shardgroup,
    shardmembership,
)
from mlops_platform.runtime.control.partitionleases import Scope, Target
from mlops_platform.runtime.control.reconcile import Request
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport.resources import LEASE

__all__ = ["ShardCoordinator"]

RBAC = rbac.requires(
    "coordination.k8s.io",
    "leases",
    ["list", "watch", "delete"],
    why="shard Leases: see the members and partitions of the group, leave it on stop",
    scope="leader-election",
)
log = logging.getLogger("mlops_platform.runtime.control.sharding")

_MEMBERSHIP = "shard membership"


class ShardCoordinator:
    """One replica of a shard group (see the module docstring for the contract).

    ``run()`` campaigns and holds partitions until :meth:`stop` (or cancellation), then leaves the
    group gracefully; :meth:`owns` is the controllers' ownership filter.
    """

    def __init__(
        self,
        client: rclient.Client,
        config: shardgroup.ShardConfig,
        targets: Sequence[Target] = (),
        *,
        scope: Scope | None = None,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self.config = config
        self._scope = scope
        self._registry = registry if registry is not None else REGISTRY
        self._clock: Clock = clock if clock is not None else RealClock()
        self._rand = rand
        self.view = shardgroup.LeaseView(config, self._clock)
        #: the group's Leases as watched (dynamic mode): the partition electors read them from here
        self._leases: rinformer.Informer | None = None
        self._stopping = asyncio.Event()
        self._membership = shardmembership.Membership(
            client,
            config,
            lambda: self._elector(client, config.member_name, member=True),
            self.plan,
            clock=self._clock,
            stopping=self._stopping,
        )
        self._releasing: set[int] = set()
        self._conflict: dict[str, int] = {}  # live members announcing another partition count
        self._conflict_logged: dict[str, int] = {}
        *_, self._members_gauge = partitionleases.gauges(self._registry)
        if not any(isinstance(f, partitionleases.QuietRefusals) for f in leaderelection.log.filters):
            leaderelection.log.addFilter(partitionleases.QuietRefusals())
        self._partitions = partitionleases.PartitionLeases(
            client,
            config,
            self,
            self._elector,
            targets,
            scope=scope,
            registry=self._registry,
            clock=self._clock,
            stopping=self._stopping,
        )

    # -- what the controllers and the gates ask -------------------------------------------------------

    def owns(self, request: Request) -> bool:
        """Whether this replica reconciles ``request`` now (its partition is held and not being given up)."""
        return partitioning.partition_of(request, self.config.partitions) in self._partitions.active

    def watched_lease(self, name: str) -> Obj | None:
        """The group's Lease ``name`` as its watch last delivered it (None: not watched or not seen)."""
        leases = self._leases
        if leases is None or not leases.has_synced() or leases.last_error is not None:
            return None
        return leases.store.get(self.config.namespace, name)

    def scope_selector(self) -> str:
        """The scope's selector for the partitions selected now (none before the first acquisition)."""
        return partitioning.partition_selector(self._partitions.selected, self.config.partitions)

    @property
    def held(self) -> frozenset[int]:
        """The partitions being reconciled by this replica."""
        return frozenset(self._partitions.active)

    def plan(self) -> partitioning.Plan:
        """The decision now, from the view and this replica's electors (see :func:`~.partitioning.plan`)."""
        cfg = self.config
        leading = self._partitions.leading()
        if cfg.shard_id is not None:
            return partitioning.Plan(1, 1, frozenset({cfg.shard_id}) - leading, ())
        members = self.view.members()
        self._conflict = {m: p for m, p in members.items() if p is not None and p != cfg.partitions}
        if self._conflict:
            return partitioning.Plan(
                0, len(members | {cfg.identity: None}), frozenset(), tuple(sorted(leading))
            )
        return partitioning.plan(cfg.identity, cfg.partitions, members, self.view.holders(), leading)

    def refusal(self, partition: int) -> str:
        """Why this replica may not acquire ``partition`` now ("" if it may)."""
        if self._stopping.is_set():
            return "stopping"
        if not self._membership.joined.is_set():
            return "not joined yet"
        p = self.plan()
        if partition in p.acquire:
            return ""
        return (
            f"partition {partition} is not this replica's to take: fair share {p.share} of "
            f"{self.config.partitions} partitions over {p.members} members"
            + (f", members announce other partition counts {self._conflict}" if self._conflict else "")
        )

    # -- lifecycle ------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`run` to give every partition up, release the Leases and return."""
        self._stopping.set()

    async def run(self) -> None:
        cfg = self.config
        tasks: list[asyncio.Task[None]] = []
        informer: rinformer.Informer | None = None
        try:
            if cfg.shard_id is None:
                informer = rinformer.Informer(
                    self._client,
                    LEASE,
                    namespace=cfg.namespace,
                    label_selector=f"{shardgroup.GROUP_LABEL}={cfg.group}",
                    clock=self._clock,
                )
                informer.add_event_handler(self.view)
                informer.start()
                self._leases = informer
                if not await self._synced(informer):
                    return
                tasks.append(asyncio.create_task(self._membership.hold(), name=_MEMBERSHIP))
                tasks.append(asyncio.create_task(self._rebalance_loop(), name="shard rebalance"))
                if not await self._until(self._membership.joined.wait()):
                    return
            for k in self._campaigned():
                tasks.append(asyncio.create_task(self._partitions.campaign(k), name=f"shard {k}"))
            stopper = asyncio.create_task(self._stopping.wait())
            try:
                await asyncio.wait({stopper, *tasks}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
            for t in tasks:
                error = t.exception() if t.done() and not t.cancelled() else None
                if error is not None:
                    raise error
        finally:
            await self._leave(tasks, informer)

    def _campaigned(self) -> list[int]:
        cfg = self.config
        return [cfg.shard_id] if cfg.shard_id is not None else list(range(cfg.partitions))

    async def _until(self, aw: Coroutine[Any, Any, Any]) -> bool:
        """Await ``aw`` unless stopped first (then cancel it): whether it completed."""
        task = asyncio.ensure_future(aw)
        stopper = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not task.done():
                task.cancel()
        if task.done() and not task.cancelled():
            task.result()
            return True
        return False

    async def _synced(self, informer: rinformer.Informer) -> bool:
        try:
            return await self._until(informer.wait_for_sync(self.config.sync_timeout))
        except TimeoutError:
            raise TimeoutError(
                f"shard Leases of {self.config.group!r} in {self.config.namespace} not listed within "
                f"{self.config.sync_timeout:.0f}s (last error: {informer.last_error!r}; check RBAC "
                "list/watch on leases.coordination.k8s.io)"
            ) from None

    async def _leave(self, tasks: list[asyncio.Task[None]], informer: rinformer.Informer | None) -> None:
        """Give every partition up (drain), leave the group, release the partitions' Leases."""
        self._stopping.set()
        await asyncio.gather(*(self._partitions.drop(k, "stopping") for k in sorted(self._partitions.active)))
        # leave first: the others stop counting this replica before its partitions come free,
        # so they match them among themselves at once
        await self._membership.leave([t for t in tasks if t.get_name() == _MEMBERSHIP])
        for elector in self._partitions.electors.values():
            elector.stop()
        for (
            task
        ) in self._partitions.background:  # re-scoping the cache is pointless now (and may wait on a LIST)
            if task.get_name().endswith(("narrow", "prewarm")):
                task.cancel()
        await asyncio.gather(*tasks, *self._partitions.background, return_exceptions=True)
        if informer is not None:
            self._leases = None
            await informer.stop()

    async def _wait(self, seconds: float) -> None:
        """Sleep on the clock; return early when stopping."""
        await partitionleases.sleep_or_stop(self._clock, self._stopping, seconds)

    def _elector(
        self, client: rclient.Client, name: str, *, member: bool = False
    ) -> leaderelection.LeaderElector:
        return leaderelection.LeaderElector(
            client,
            self.config.election(name, member=member),
            registry=self._registry,
            clock=self._clock,
            rand=self._rand,
        )

    # -- rebalancing --------------------------------------------------------------------------------------

    async def _rebalance_loop(self) -> None:
        while not self._stopping.is_set():
            await self._wait(self.config.retry_period)
            if not self._stopping.is_set():
                self._rebalance()

    def _prewarm_for_silent_holders(self) -> None:
        """List ahead the partitions this replica is about to take: free ones the matching gives it,
        and those it would take if their silent holders were dead, so a takeover does not wait for
        that LIST after the Lease expires; drop them again when the holder renews (or once they
        are taken, by whoever)."""
        cfg = self.config
        if self._scope is None or cfg.shard_id is not None or self._conflict:
            return
        silent = self.view.silent(2.5 * cfg.retry_period) - {cfg.identity}
        # the matching as if the silent holders were gone: what it gives this replica to take (their
        # partitions, and free or expired ones: a Lease that just expired is taken a moment later)
        holders = {k: h for k, h in self.view.holders().items() if h not in silent}
        members = [m for m in self.view.members() if m not in silent]
        leading = self._partitions.leading()
        wanted = (
            set(partitioning.plan(cfg.identity, cfg.partitions, members, holders, leading).acquire) - leading
        )
        if frozenset(wanted) != self._partitions.prewarm:
            self._partitions.prewarm = frozenset(wanted)
            log.info(
                "listing ahead the partitions about to be taken" if wanted else "nothing listed ahead",
                extra={"partitions": sorted(wanted), "silent": sorted(silent)},
            )
            self._partitions.spawn(self._partitions.narrow(-1), "shard prewarm")

    def _rebalance(self) -> None:
        self._prewarm_for_silent_holders()
        p = self.plan()
        self._members_gauge.set(p.members)
        if self._conflict != self._conflict_logged:
            self._conflict_logged = dict(self._conflict)
            if self._conflict:
                log.error(
                    "members of the shard group announce other partition counts: holding nothing",
                    extra={"conflict": self._conflict, "partitions": self.config.partitions},
                )
        for k in p.release:
            if k in self._releasing or k not in self._partitions.active:
                continue
            if self._conflict:
                reason = f"members announce other partition counts {self._conflict}"
            else:
                reason = (
                    f"rebalance: fair share {p.share} of {self.config.partitions} partitions over "
                    f"{p.members} members, holding {len(self._partitions.active)}"
                )
            self._releasing.add(k)
            self._partitions.spawn(self._give_up(k, reason), f"shard {k} give up")

    async def _give_up(self, k: int, reason: str) -> None:
        try:
            await self._partitions.drop(k, reason)
            elector = self._partitions.electors.get(k)
            if elector is not None:
                elector.stop()  # releases the Lease (the elector's work, _hold, is already idle)
        finally:
            self._releasing.discard(k)
