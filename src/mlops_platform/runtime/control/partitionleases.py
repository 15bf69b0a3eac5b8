"""The partition Leases of one shard replica (:mod:`~mlops_platform.runtime.control.sharding`): one
client-go elector per partition, and what the replica does while it leads one.

Contract (the coordinator, the :class:`Arbiter`, decides; this module carries it out):

- **Partition Leases.** Partition ``k`` is guarded by Lease ``<group>-shard-<k>``. Its elector
  reads a Lease another replica holds from the group's watch (dynamic mode:
  :meth:`Arbiter.watched_lease`), not with a GET per acquire interval; a write that fails (a
  conflict: the watch was behind) makes the next read a GET. It writes through a :class:`Gate`: an
  acquisition reaches the API server only if :meth:`Arbiter.refusal` allows it now (refused ones
  raise :class:`NotOurTurn`, logged at debug by :class:`QuietRefusals`); reads, renewals and
  releases always pass.
- **Holding.** A replica reconciles ``k`` only while its elector for that Lease leads. On acquiring
  ``k`` it first re-scopes the cache to list ``k``'s children (within ``sync_timeout``), then calls
  every :class:`Target`'s ``enqueue_all(where=in k)``. To give ``k`` up (:meth:`PartitionLeases.drop`:
  rebalance, stop, lost renewal) it first stops admitting ``k``'s requests, awaits every target's
  ``wait_idle(in k)``, and only then may the elector release the Lease; the cache is narrowed again
  in the background after the drain.
- **Scope.** The scope selects exactly the partitions reconciled, being acquired, or listed ahead
  (:attr:`PartitionLeases.prewarm`); widening lists only the added partitions.
- **Metrics.** ``mlops_platform_shard_partitions_held`` and
  ``mlops_platform_shard_partition_held{partition}`` (0/1); one JSON log line per acquisition and
  per giving up, with ``partition``, ``lease`` and ``reason``.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import time
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, cast

from prometheus_client import CollectorRegistry, Gauge

from mlops_platform.runtime.clock import Clock
from mlops_platform.runtime.control import leaderelection, partitioning, shardgroup
from mlops_platform.runtime.control.reconcile import Request
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient

__all__ = [
    "Arbiter",
    "Gate",
    "NotOurTurn",
    "PartitionLeases",
    "QuietRefusals",
    "Scope",
    "Target",
    "Where",
    "gauges",
    "sleep_or_stop",
]

log = logging.getLogger("mlops_platform.runtime.control.sharding")

_LOST = "lost: the Lease was not renewed within the renew deadline"
Where = Callable[[Request], bool]
ElectorFactory = Callable[[rclient.Client, str], leaderelection.LeaderElector]


class Target(Protocol):
    """What the coordinator drives (:class:`~mlops_platform.runtime.control.controller.Controller`)."""

    def enqueue_all(self, where: Where | None = None) -> None: ...

    async def wait_idle(self, where: Where) -> None: ...


class Scope(Protocol):
    """The cache the coordinator narrows to its partitions (:class:`~.cache.Cache`)."""

    async def set_scope(self, label_selector: str | None, *, adding: str | None = None) -> None: ...


class Arbiter(Protocol):
    """What the partitions ask the coordinator (:class:`~.sharding.ShardCoordinator`)."""

    def watched_lease(self, name: str) -> Obj | None: ...

    def refusal(self, partition: int) -> str: ...

    def plan(self) -> partitioning.Plan: ...


async def sleep_or_stop(clock: Clock, stopping: asyncio.Event, seconds: float) -> None:
    """Sleep on ``clock``; return early when ``stopping`` is set."""
    sleep = asyncio.ensure_future(clock.sleep(seconds))
    stopper = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({sleep, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleep.cancel()
        stopper.cancel()


class NotOurTurn(Exception):
    """An acquisition refused by the coordinator before it reaches the API server."""


class QuietRefusals(logging.Filter):
    """Demote the elector's "error updating lease" lines for refusals to debug: they are the plan
    working (a free partition is another replica's to take), not errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if not any(isinstance(a, NotOurTurn) for a in args):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


class Gate:
    """The client a partition's elector writes through: reads, renewals and releases pass; a write
    that would make this replica the holder passes only if the coordinator allows it now.
    Duck-typed as a :class:`~.client.Client`: a :class:`LeaderElector` calls only these methods."""

    def __init__(self, client: rclient.Client, arbiter: Arbiter, partition: int, identity: str) -> None:
        self._client, self._arbiter, self._k, self._identity = client, arbiter, partition, identity
        self.elector: leaderelection.LeaderElector | None = None
        self.previous: dict[str, Any] = {}  # the record before our last acquisition
        self._last: dict[str, Any] = {}
        self._fresh = False  # the next get() reads the server, not the watch

    async def get(self, res: rclient.Resource, name: str, namespace: str | None = None) -> rclient.JSON:
        # observing a Lease someone else holds: the group's watch has it already, a GET per acquire
        # interval would only repeat it (most of a standby's requests). A stale copy is safe: the
        # write that follows carries its resourceVersion and fails with a conflict, after which
        # the next read goes to the server.
        cached = None if self._fresh else self._arbiter.watched_lease(name)
        if cached is not None:
            return self._seen(copy.deepcopy(cached))
        self._fresh = False
        return self._seen(await self._client.get(res, name, namespace))

    async def create(
        self, res: rclient.Resource, obj: rclient.JSON, namespace: str | None = None
    ) -> rclient.JSON:
        self._check(obj)
        return self._seen(await self._written(self._client.create(res, obj, namespace)))

    async def replace(
        self, res: rclient.Resource, obj: rclient.JSON, *, subresource: str | None = None
    ) -> rclient.JSON:
        self._check(obj)
        return self._seen(await self._written(self._client.replace(res, obj, subresource=subresource)))

    async def _written(self, write: Coroutine[Any, Any, rclient.JSON]) -> rclient.JSON:
        try:
            return await write
        except rclient.ApiError:
            self._fresh = True  # a conflict (or worse): read the server's copy next time
            raise

    def _seen(self, lease: rclient.JSON) -> rclient.JSON:
        self._last = dict(lease.get("spec") or {})
        return lease

    def _check(self, lease: rclient.JSON) -> None:
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if holder != self._identity or (self.elector and self.elector.is_leader()):
            return  # a release or a renewal
        refusal = self._arbiter.refusal(self._k)
        if refusal:
            raise NotOurTurn(refusal)
        self.previous = self._last


_GAUGES: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Gauge, Gauge, Gauge]] = (
    weakref.WeakKeyDictionary()
)


def gauges(registry: CollectorRegistry) -> tuple[Gauge, Gauge, Gauge]:
    """The shard gauges of ``registry`` (held, held per partition, members), made once per registry."""
    found = _GAUGES.get(registry)
    if found is None:
        found = (
            Gauge("mlops_platform_shard_partitions_held", "Partitions this replica holds", registry=registry),
            Gauge(
                "mlops_platform_shard_partition_held",
                "1 while this replica holds the partition (reconciles its objects), else 0",
                ["partition"],
                registry=registry,
            ),
            Gauge(
                "mlops_platform_shard_members",
                "Live members of the shard group as this replica sees them, itself included",
                registry=registry,
            ),
        )
        _GAUGES[registry] = found
    return found


class PartitionLeases:
    """One replica's partition Leases: an elector per partition (:meth:`campaign`), the partitions it
    reconciles (:attr:`active`) and the cache scope that follows them (see the module docstring)."""

    def __init__(
        self,
        client: rclient.Client,
        config: shardgroup.ShardConfig,
        arbiter: Arbiter,
        elector: ElectorFactory,
        targets: Sequence[Target],
        *,
        scope: Scope | None,
        registry: CollectorRegistry,
        clock: Clock,
        stopping: asyncio.Event,
    ) -> None:
        self._client = client
        self.config = config
        self._arbiter = arbiter
        self._elector = elector
        self._targets = list(targets)
        self._scope = scope
        self._scope_lock = asyncio.Lock()
        self.selected: frozenset[int] = frozenset()  # partitions the scope selects now
        self._acquiring: set[int] = set()  # led, being listed before they are reconciled
        self.prewarm: frozenset[int] = frozenset()  # listed ahead: their silent holder's heir is us
        self.active: set[int] = set()  # partitions being reconciled (a subset of those led)
        self.electors: dict[int, leaderelection.LeaderElector] = {}
        self._gates: dict[int, Gate] = {}
        self._clock = clock
        self._stopping = stopping
        self.background: set[asyncio.Task[None]] = set()  # give-ups and re-scopes
        self._held_gauge, self._partition_gauge, _ = gauges(registry)
        self._held_gauge.set(0)
        for k in range(config.partitions):
            self._partition_gauge.labels(partition=str(k)).set(0)

    def leading(self) -> set[int]:
        """The partitions whose Lease this replica's electors hold now."""
        return {k for k, e in self.electors.items() if e.is_leader()}

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` in the background (awaited or cancelled when the coordinator leaves)."""
        task = asyncio.create_task(work, name=name)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def campaign(self, k: int) -> None:
        """Observe partition ``k``'s Lease and hold it when allowed, for as long as the coordinator runs."""
        name = self.config.lease_name(k)
        while not self._stopping.is_set():
            if (
                not await shardgroup.ensure_lease(self._client, self.config, name, "partition")
                or self._stopping.is_set()
            ):
                await sleep_or_stop(self._clock, self._stopping, self.config.retry_period)
                continue
            gate = Gate(self._client, self._arbiter, k, self.config.identity)
            elector = self._elector(cast(rclient.Client, gate), name)
            gate.elector = elector
            self.electors[k], self._gates[k] = elector, gate
            try:
                await elector.run(functools.partial(self._hold, k))
            except Exception:
                log.exception("partition %d: election failed", k, extra={"partition": k, "lease": name})
                await sleep_or_stop(self._clock, self._stopping, self.config.retry_period)
            finally:
                if self.electors.get(k) is elector:
                    del self.electors[k]

    async def _hold(self, k: int) -> None:
        """The elector's work while it leads partition ``k``: reconcile it until leadership ends."""
        self._acquiring.add(k)
        try:
            await asyncio.wait_for(self._rescope(), self.config.sync_timeout)
        except TimeoutError:
            raise TimeoutError(
                f"partition {k}: its children not listed within {self.config.sync_timeout:.0f}s"
            ) from None
        finally:
            self._acquiring.discard(k)
        self._gain(k)
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            await self.drop(k, _LOST)

    def _gain(self, k: int) -> None:
        previous = self._gates[k].previous if k in self._gates else {}
        holder = str(previous.get("holderIdentity") or "")
        if not previous.get("renewTime"):
            reason = "new Lease"
        elif not holder:
            reason = "free: released by its previous holder"
        elif holder == self.config.identity:
            reason = "held by this identity before a restart"
        else:
            reason = f"expired: {holder} stopped renewing"
        if self.config.shard_id is not None:
            reason = f"static shard id; {reason}"
        self.active.add(k)
        self._set_gauges(k, 1)
        p = self._arbiter.plan()
        log.info(
            "partition acquired",
            extra={
                "partition": k,
                "lease": self.config.lease_name(k),
                "reason": reason,
                "held": sorted(self.active),
                "share": p.share,
                "members": p.members,
            },
        )
        where = self._in(k)
        for t in self._targets:
            t.enqueue_all(where)

    async def drop(self, k: int, reason: str) -> None:
        """Stop reconciling partition ``k`` and wait for its in-flight reconciles (idempotent)."""
        if k not in self.active:
            return
        self.active.discard(k)
        self._set_gauges(k, 0)
        where = self._in(k)
        await asyncio.gather(*(t.wait_idle(where) for t in self._targets))
        log.info(
            "partition given up",
            extra={
                "partition": k,
                "lease": self.config.lease_name(k),
                "reason": reason,
                "held": sorted(self.active),
            },
        )
        if self._scope is not None and not self._stopping.is_set():
            # its children leave the cache (memory) after the drain, in the background: the Lease
            # is released without waiting for the re-list
            self.spawn(self.narrow(k), f"shard {k} narrow")

    async def narrow(self, k: int) -> None:
        """Re-scope in the background (``k``: the partition given up, -1 for a pre-listing change)."""
        try:
            await self._rescope()
        except Exception:  # the next acquisition or give-up re-scopes again
            log.exception("partition %d: could not re-scope the cache", k, extra={"partition": k})

    async def _rescope(self) -> None:
        """Make the scope select exactly the partitions reconciled or being acquired."""
        if self._scope is None:
            return
        async with self._scope_lock:
            wanted = frozenset(self.active | self._acquiring | self.prewarm)
            if wanted != self.selected:
                started = time.monotonic()
                p = self.config.partitions
                # only more partitions (a takeover, a partition listed ahead): list just theirs
                widening = wanted > self.selected
                adding = partitioning.partition_selector(wanted - self.selected, p) if widening else None
                await self._scope.set_scope(partitioning.partition_selector(wanted, p), adding=adding)
                log.info(
                    "scope re-listed",
                    extra={
                        "partitions": sorted(wanted),
                        "before": sorted(self.selected),
                        "seconds": round(time.monotonic() - started, 2),
                    },
                )
                self.selected = wanted

    def _in(self, k: int) -> Where:
        partitions = self.config.partitions
        return lambda req: partitioning.partition_of(req, partitions) == k

    def _set_gauges(self, k: int, value: int) -> None:
        self._partition_gauge.labels(partition=str(k)).set(value)
        self._held_gauge.set(len(self.active))
