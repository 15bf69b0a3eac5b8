"""Sharding: each replica reconciles a stable hash partition of the primary objects, every partition
behind its own Lease, so partitions fail over one by one and reconciling scales past one process.
Kubernetes stays the distributed engine: Leases, written by client-go's election protocol
(:class:`~mlops_platform.runtime.control.leaderelection.LeaderElector`), are the only coordination.

Contract (one :class:`ShardCoordinator` per replica; replicas of a group share ``group``, the
Lease namespace and the partition count ``P``, and have distinct identities):

- **Partitions.** A request's bucket is :func:`bucket_of`: the first 8 bytes (big endian) of the
  SHA-256 of ``namespace/name`` (``name`` when cluster-scoped), modulo :data:`BUCKETS` (256): the
  same in every process and release (Python's ``hash()`` is salted per process). Its partition
  (:func:`partition_of`) is the bucket modulo ``P`` (so ``P <= 256``). Children map to their
  owner's request before this (the controller's owner mapper), so they land in their owner's
  partition.
- **Scoped caches.** Children carry their owner's bucket as label :data:`BUCKET_LABEL` (the
  controller puts it there; a bucket never changes with ``P``, so changing ``P`` relabels
  nothing). With a ``scope`` (the manager's cache), the coordinator narrows the scoped informers to
  the buckets of the partitions it holds (:func:`partition_selector`): a replica lists, watches,
  decodes and stores only its own partitions' children, not every replica all of them. Acquiring
  ``k`` first lists ``k``'s children (only theirs: :meth:`~.cache.Cache.set_scope` with
  ``adding``, within ``sync_timeout``), then starts reconciling it;
  giving ``k`` up narrows again after the drain. The primary objects are narrowed the same way
  (the manager scopes the controllers' primary kinds): they carry the label too, put there by a
  :class:`~.labeler.BucketLabeler`, and the hash of their name stays the truth (a missing or wrong
  label delays an object until it is labelled, never moves it). A partition whose holder has not
  renewed for 2.5 retry periods (likely dead: live holders renew every period) is listed ahead by
  the replica the matching would give it to without that holder, so the takeover after expiry
  does not wait for the LIST; it is dropped again if the holder renews.
- **Partition Leases.** Partition ``k`` is guarded by Lease ``<group>-shard-<k>``. Its elector
  reads a Lease another replica holds from the group's watch (dynamic mode), not with a GET per
  acquire interval; a write that fails (a conflict: the watch was behind) makes the next read a GET. A replica
  reconciles ``k`` only while its elector for that Lease leads. To give ``k`` up (rebalance, stop) it
  first stops admitting ``k``'s requests (queued ones are skipped when dequeued), waits until the
  in-flight reconciles of ``k`` have ended, and only then releases the Lease. When no renewal
  succeeds within ``renew_deadline`` the elector ends leadership and ``k`` is given up the same
  way. So two replicas never reconcile the same object at once, under client-go's own assumption:
  a holder stops within ``renew_deadline``, before its Lease expires for the others
  (``renew_deadline < lease_duration``), and its in-flight reconciles end in the time left.
- **Membership** (dynamic mode, ``shard_id=None``). Each replica also holds the member Lease
  ``<group>-member-<identity>``, renewed every :attr:`~ShardConfig.member_retry_period` (a third
  of the lease duration, at most half the renew deadline: membership only sizes the fair share,
  the partition Leases guard the writes). Every Lease of the group carries the label
  ``mlops.platform/shard-group=<group>``; one informer (LIST + WATCH with that selector) is this
  replica's :class:`LeaseView`. A member is live while its record is unexpired by the local clock
  (when this replica last saw the record change, plus ``leaseDurationSeconds``: the electors' rule)
  and once this replica has seen it renewed (a member Lease first seen may be long dead).
- **Fair share.** A replica aims at ``ceil(P / live members)`` partitions (:func:`plan`). Its elector
  of every partition keeps observing that Lease (so an expiry is seen on time), but may write an
  acquisition only for a free partition the rendezvous matching gives this replica (the highest
  ``rank(member, k)`` among members under their share); other acquisitions are refused before they
  reach the API server (the elector's "error updating lease" line for them is demoted to debug).
  A replica beyond its share gives up its lowest-ranked partitions. Replicas whose views agree thus
  agree on who takes what: 3 replicas and ``P=3`` end with one each. A killed replica's partitions
  are free once its Leases expire: another replica takes each within ``lease_duration`` plus two
  acquire intervals at worst (one to see the last renewal, one to retry: ``2 * 2.2 * retry_period``).
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
import collections
import copy
import dataclasses
import functools
import hashlib
import logging
import math
import random
import re
import time
import weakref
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from typing import Any, Protocol, cast

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from mlops_platform.runtime import objects, rbac
from mlops_platform.runtime.caching import informer as rinformer
from mlops_platform.runtime.clock import Clock, RealClock
from mlops_platform.runtime.control import leaderelection
from mlops_platform.runtime.control.reconcile import Request
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport.resources import LEASE

__all__ = [
    "BUCKETS",
    "BUCKET_LABEL",
    "GROUP_LABEL",
    "Plan",
    "Scope",
    "ShardConfig",
    "ShardCoordinator",
    "Target",
    "bucket_of",
    "fair_share",
    "partition_of",
    "partition_selector",
    "plan",
    "preference",
    "rank",
]

RBAC = rbac.requires(
    "coordination.k8s.io",
    "leases",
    ["list", "watch", "delete"],
    why="shard Leases: see the members and partitions of the group, leave it on stop",
    scope="leader-election",
)
log = logging.getLogger("mlops_platform.runtime.control.sharding")

GROUP_LABEL = "mlops.platform/shard-group"
ROLE_LABEL = "mlops.platform/shard-role"  # "partition" or "member"
SHARDS_ANNOTATION = "mlops.platform/shards"
#: hash buckets of the primary objects; a partition is a fixed set of buckets (bucket mod P)
BUCKETS = 256
#: the label carrying its owner's bucket on every child (see "Scoped caches")
BUCKET_LABEL = "mlops.platform/shard-bucket"
_NO_BUCKET = "none"  # a value no object carries: the selector of no partition
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_RECORD_KEYS = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")
_LOST = "lost: the Lease was not renewed within the renew deadline"
_MEMBERSHIP = "shard membership"
Where = Callable[[Request], bool]


# -- the arithmetic (pure) ------------------------------------------------------------------------


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def bucket_of(request: Request) -> int:
    """The bucket of ``request``: SHA-256 of ``namespace/name`` (first 8 bytes) mod :data:`BUCKETS`."""
    key = f"{request.namespace}/{request.name}" if request.namespace else request.name
    return _hash64(key) % BUCKETS


def partition_of(request: Request, partitions: int) -> int:
    """The partition of ``request``: its :func:`bucket_of` mod ``partitions``."""
    return bucket_of(request) % partitions


def partition_selector(held: Collection[int], partitions: int) -> str:
    """The label selector of the children of the ``held`` partitions (of ``partitions``): the
    :data:`BUCKET_LABEL` values of their buckets; matches nothing when ``held`` is empty."""
    buckets = [str(b) for b in range(BUCKETS) if b % partitions in held]
    return f"{BUCKET_LABEL} in ({','.join(buckets) or _NO_BUCKET})"


def fair_share(partitions: int, members: int) -> int:
    """How many partitions each of ``members`` live replicas should hold: ``ceil(P / members)``."""
    return math.ceil(partitions / max(1, members))


def rank(identity: str, partition: int) -> int:
    """The rendezvous (highest-random-weight) score of ``identity`` for ``partition``."""
    return _hash64(f"{identity}\x00{partition}")


def preference(identity: str, partitions: int) -> list[int]:
    """The partitions in the order ``identity`` prefers them (highest :func:`rank` first)."""
    return sorted(range(partitions), key=lambda k: rank(identity, k), reverse=True)


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """What one replica should do now (see :func:`plan`)."""

    share: int  # partitions this replica should hold
    members: int  # live members, this replica included
    acquire: frozenset[int]  # partitions this replica may take now
    release: tuple[int, ...]  # held partitions beyond the share, to give up


def plan(
    identity: str,
    partitions: int,
    members: Collection[str],
    holders: Mapping[int, str],
    leading: Collection[int] = (),
) -> Plan:
    """The fair-share decision of ``identity`` from its view of the group.

    ``members``: live members (``identity`` is added); ``holders``: partition -> live holder as seen
    (free partitions are absent); ``leading``: the partitions whose Lease this replica's electors hold
    (they override ``holders``). A holder that is not a live member still counts as holding.

    - share = ``ceil(P / members)``; this replica keeps its ``share`` best-ranked partitions and
      releases the rest of those it leads;
    - a partition recorded as held by ``identity`` that no elector of it leads (the Lease of this
      identity before a restart) is taken back at once if it is within the share;
    - free partitions are matched to members under their share by descending ``rank(member, k)``;
      this replica may acquire the ones matched to it.
    """
    everyone = set(members) | {identity}
    share = fair_share(partitions, len(everyone))
    held = {k: h for k, h in holders.items() if 0 <= k < partitions and h}
    held.update({k: identity for k in leading})
    mine = sorted(
        (k for k, h in held.items() if h == identity), key=lambda k: rank(identity, k), reverse=True
    )
    keep = mine[:share]
    release = tuple(k for k in reversed(mine[share:]) if k in leading)  # worst-ranked first
    load = collections.Counter(h for k, h in held.items() if h != identity or k in keep)
    capacity = {m: max(0, share - load[m]) for m in everyone}
    free = [k for k in range(partitions) if k not in held]
    matched: dict[int, str] = {}
    for _, m, k in sorted(((rank(m, k), m, k) for m in everyone for k in free), reverse=True):
        if k not in matched and capacity[m] > 0:
            matched[k] = m
            capacity[m] -= 1
    acquire = {k for k in keep if k not in leading} | {k for k, m in matched.items() if m == identity}
    return Plan(share, len(everyone), frozenset(acquire), release)


# -- configuration --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ShardConfig:
    """A replica's place in a shard group and the Lease timing (seconds, as client-go's)."""

    namespace: str
    group: str  # names the Leases; e.g. the leader-election id
    identity: str
    partitions: int
    shard_id: int | None = None  # static mode: only this partition
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    sync_timeout: float = 120.0  # for the LIST of the group's Leases

    def __post_init__(self) -> None:
        if not (self.namespace and self.group and self.identity):
            raise ValueError("namespace, group and identity are required")
        if len(self.group) > 63 or not _LABEL_VALUE.match(self.group):
            raise ValueError(f"group {self.group!r} must be a valid label value (<= 63 characters)")
        if not 1 <= self.partitions <= BUCKETS:
            raise ValueError(f"partitions must be in [1, {BUCKETS}], got {self.partitions}")
        if self.shard_id is not None and not 0 <= self.shard_id < self.partitions:
            raise ValueError(f"shard_id must be in [0, {self.partitions}), got {self.shard_id}")
        self.election(self.lease_name(0))  # the timing rules of client-go

    def lease_name(self, partition: int) -> str:
        return f"{self.group}-shard-{partition}"

    @property
    def member_name(self) -> str:
        """``<group>-member-<identity>``, the identity made a DNS label (hashed when changed)."""
        clean = re.sub(r"[^a-z0-9-]+", "-", self.identity.lower()).strip("-")
        if clean != self.identity or len(clean) > 180:
            clean = f"{clean[:170].strip('-')}-{hashlib.sha256(self.identity.encode()).hexdigest()[:8]}"
        return f"{self.group}-member-{clean.strip('-')}"

    def election(self, name: str, *, member: bool = False) -> leaderelection.LeaderElectionConfig:
        return leaderelection.LeaderElectionConfig(
            namespace=self.namespace,
            name=name,
            identity=self.identity,
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.member_retry_period if member else self.retry_period,
            release_on_cancel=True,
        )

    @property
    def member_retry_period(self) -> float:
        """How often a member Lease is renewed: membership only sizes the fair share (the partition
        Leases guard the writes), so a third of the lease duration is enough (within half the renew
        deadline, so client-go's ``renew deadline > 1.2 x retry period`` holds), never more often
        than the partitions' retry period."""
        return max(self.retry_period, min(self.lease_duration / 3, self.renew_deadline / 2))


class Target(Protocol):
    """What the coordinator drives (:class:`~mlops_platform.runtime.control.controller.Controller`)."""

    def enqueue_all(self, where: Where | None = None) -> None: ...

    async def wait_idle(self, where: Where) -> None: ...


class Scope(Protocol):
    """The cache the coordinator narrows to its partitions (:class:`~.cache.Cache`)."""

    async def set_scope(self, label_selector: str | None, *, adding: str | None = None) -> None: ...


# -- the view of the group --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Seen:
    holder: str
    duration: float
    observed: float  # local clock when the record last changed
    shards: int | None  # announced by a member Lease
    record: tuple[Any, ...]
    renewing: bool  # the record changed while this replica watched it


class LeaseView:
    """The group's Leases as this replica last saw them: an informer event handler.

    Expiry is judged like the electors judge it: the local time at which the record last changed
    plus its ``leaseDurationSeconds``; the server's timestamps are never compared with local time.
    A partition Lease first seen with a holder counts as held until it expires by that rule.
    """

    def __init__(self, config: ShardConfig, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._names = {config.lease_name(k): k for k in range(config.partitions)}
        self._partitions: dict[int, _Seen] = {}
        self._members: dict[str, _Seen] = {}  # by Lease name

    def on_add(self, obj: Obj) -> None:
        self._observe(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._observe(new)

    def on_delete(self, obj: Obj) -> None:
        name = objects.name(obj)
        if name in self._names:
            self._partitions.pop(self._names[name], None)
        self._members.pop(name, None)

    def _observe(self, obj: Obj) -> None:
        name = objects.name(obj)
        spec = obj.get("spec") or {}
        record = tuple(spec.get(k) for k in _RECORD_KEYS)
        announced = objects.annotations(obj).get(SHARDS_ANNOTATION, "")
        if name in self._names:
            table: dict[Any, _Seen] = self._partitions
            key: Any = self._names[name]
        elif objects.labels(obj).get(ROLE_LABEL) == "member":
            table, key = self._members, name
        else:
            return
        old = table.get(key)
        same = old is not None and old.record == record
        table[key] = _Seen(
            holder=str(spec.get("holderIdentity") or ""),
            duration=float(spec.get("leaseDurationSeconds") or self._config.lease_duration),
            observed=old.observed if old is not None and same else self._clock.now(),
            shards=int(announced) if announced.isdigit() else None,
            record=record,
            renewing=old is not None and (old.renewing or not same),
        )

    def _live(self, seen: _Seen) -> bool:
        return bool(seen.holder) and seen.observed + seen.duration > self._clock.now()

    def members(self) -> dict[str, int | None]:
        """Live members seen renewing: identity -> the partition count it announces.

        A member Lease seen for the first time may be long dead: its expiry can only be judged from
        then on, so it counts once this replica has seen it renewed (live members renew every
        retry period). Until then it would be matched to free partitions it never takes.
        """
        return {s.holder: s.shards for s in self._members.values() if s.renewing and self._live(s)}

    def holders(self) -> dict[int, str]:
        """Partition -> its live holder (free and expired partitions are absent)."""
        return {k: s.holder for k, s in self._partitions.items() if self._live(s)}

    def silent(self, quiet: float) -> set[str]:
        """Holders of live partition Leases not renewed for ``quiet`` seconds (by the local clock):
        likely dead (a live holder renews every retry period), not yet expired."""
        now = self._clock.now()
        return {s.holder for s in self._partitions.values() if self._live(s) and now - s.observed >= quiet}


# -- the coordinator --------------------------------------------------------------------------------


class _NotOurTurn(Exception):
    """An acquisition refused by the coordinator before it reaches the API server."""


class _QuietRefusals(logging.Filter):
    """Demote the elector's "error updating lease" lines for refusals to debug: they are the plan
    working (a free partition is another replica's to take), not errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if not any(isinstance(a, _NotOurTurn) for a in args):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


class _Gate:
    """The client a partition's elector writes through: reads, renewals and releases pass; a write
    that would make this replica the holder passes only if the coordinator allows it now.
    Duck-typed as a :class:`~.client.Client`: a :class:`LeaderElector` calls only these methods."""

    def __init__(self, client: rclient.Client, coordinator: ShardCoordinator, partition: int) -> None:
        self._client, self._coordinator, self._k = client, coordinator, partition
        self.elector: leaderelection.LeaderElector | None = None
        self.previous: dict[str, Any] = {}  # the record before our last acquisition
        self._last: dict[str, Any] = {}
        self._fresh = False  # the next get() reads the server, not the watch

    async def get(self, res: rclient.Resource, name: str, namespace: str | None = None) -> rclient.JSON:
        # observing a Lease someone else holds: the group's watch has it already, a GET per acquire
        # interval would only repeat it (most of a standby's requests). A stale copy is safe: the
        # write that follows carries its resourceVersion and fails with a conflict, after which
        # the next read goes to the server.
        cached = None if self._fresh else self._coordinator.watched_lease(name)
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
        if holder != self._coordinator.config.identity or (self.elector and self.elector.is_leader()):
            return  # a release or a renewal
        refusal = self._coordinator.refusal(self._k)
        if refusal:
            raise _NotOurTurn(refusal)
        self.previous = self._last


_GAUGES: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Gauge, Gauge, Gauge]] = (
    weakref.WeakKeyDictionary()
)


def _gauges(registry: CollectorRegistry) -> tuple[Gauge, Gauge, Gauge]:
    gauges = _GAUGES.get(registry)
    if gauges is None:
        gauges = (
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
        _GAUGES[registry] = gauges
    return gauges


class ShardCoordinator:
    """One replica of a shard group (see the module docstring for the contract).

    ``run()`` campaigns and holds partitions until :meth:`stop` (or cancellation), then leaves the
    group gracefully; :meth:`owns` is the controllers' ownership filter.
    """

    def __init__(
        self,
        client: rclient.Client,
        config: ShardConfig,
        targets: Sequence[Target] = (),
        *,
        scope: Scope | None = None,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self.config = config
        self._targets = list(targets)
        self._scope = scope
        self._scope_lock = asyncio.Lock()
        self._selected: frozenset[int] = frozenset()  # partitions the scope selects now
        self._acquiring: set[int] = set()  # led, being listed before they are reconciled
        self._prewarm: frozenset[int] = frozenset()  # listed ahead: their silent holder's heir is us
        self._registry = registry if registry is not None else REGISTRY
        self._clock: Clock = clock if clock is not None else RealClock()
        self._rand = rand
        self.view = LeaseView(config, self._clock)
        #: the group's Leases as watched (dynamic mode): the partition electors read them from here
        self._leases: rinformer.Informer | None = None
        self._active: set[int] = set()  # partitions being reconciled (a subset of those led)
        self._electors: dict[int, leaderelection.LeaderElector] = {}
        self._gates: dict[int, _Gate] = {}
        self._member: leaderelection.LeaderElector | None = None
        self._joined = asyncio.Event()  # campaigning allowed (static mode: at once)
        if config.shard_id is not None:
            self._joined.set()
        self._stopping = asyncio.Event()
        self._releasing: set[int] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._conflict: dict[str, int] = {}  # live members announcing another partition count
        self._conflict_logged: dict[str, int] = {}
        self._held_gauge, self._partition_gauge, self._members_gauge = _gauges(self._registry)
        if not any(isinstance(f, _QuietRefusals) for f in leaderelection.log.filters):
            leaderelection.log.addFilter(_QuietRefusals())
        self._held_gauge.set(0)
        for k in range(config.partitions):
            self._partition_gauge.labels(partition=str(k)).set(0)

    # -- what the controllers and the gates ask -------------------------------------------------------

    def owns(self, request: Request) -> bool:
        """Whether this replica reconciles ``request`` now (its partition is held and not being given up)."""
        return partition_of(request, self.config.partitions) in self._active

    def watched_lease(self, name: str) -> Obj | None:
        """The group's Lease ``name`` as its watch last delivered it (None: not watched or not seen)."""
        leases = self._leases
        if leases is None or not leases.has_synced() or leases.last_error is not None:
            return None
        return leases.store.get(self.config.namespace, name)

    def scope_selector(self) -> str:
        """The scope's selector for the partitions selected now (none before the first acquisition)."""
        return partition_selector(self._selected, self.config.partitions)

    @property
    def held(self) -> frozenset[int]:
        """The partitions being reconciled by this replica."""
        return frozenset(self._active)

    def plan(self) -> Plan:
        """The decision now, from the view and this replica's electors (see :func:`plan`)."""
        cfg = self.config
        leading = {k for k, e in self._electors.items() if e.is_leader()}
        if cfg.shard_id is not None:
            return Plan(1, 1, frozenset({cfg.shard_id}) - leading, ())
        members = self.view.members()
        self._conflict = {m: p for m, p in members.items() if p is not None and p != cfg.partitions}
        if self._conflict:
            return Plan(0, len(members | {cfg.identity: None}), frozenset(), tuple(sorted(leading)))
        return plan(cfg.identity, cfg.partitions, members, self.view.holders(), leading)

    def refusal(self, partition: int) -> str:
        """Why this replica may not acquire ``partition`` now ("" if it may)."""
        if self._stopping.is_set():
            return "stopping"
        if not self._joined.is_set():
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
                    label_selector=f"{GROUP_LABEL}={cfg.group}",
                    clock=self._clock,
                )
                informer.add_event_handler(self.view)
                informer.start()
                self._leases = informer
                if not await self._synced(informer):
                    return
                tasks.append(asyncio.create_task(self._membership(), name=_MEMBERSHIP))
                tasks.append(asyncio.create_task(self._rebalance_loop(), name="shard rebalance"))
                if not await self._until(self._joined.wait()):
                    return
            for k in self._partitions():
                tasks.append(asyncio.create_task(self._campaign(k), name=f"shard {k}"))
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

    def _partitions(self) -> list[int]:
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
        await asyncio.gather(*(self._drop(k, "stopping") for k in sorted(self._active)))
        if self._member is not None:
            # leave first: the others stop counting this replica before its partitions come free,
            # so they match them among themselves at once
            self._member.stop()
            await asyncio.gather(*(t for t in tasks if t.get_name() == _MEMBERSHIP), return_exceptions=True)
            try:
                await self._client.delete(LEASE, self.config.member_name, self.config.namespace)
            except Exception as e:  # best effort: an expired member Lease counts for nobody
                log.warning("could not delete the member Lease %s: %r", self.config.member_name, e)
        for elector in self._electors.values():
            elector.stop()
        for task in self._background:  # re-scoping the cache is pointless now (and may wait on a LIST)
            if task.get_name().endswith(("narrow", "prewarm")):
                task.cancel()
        await asyncio.gather(*tasks, *self._background, return_exceptions=True)
        if informer is not None:
            self._leases = None
            await informer.stop()

    async def _wait(self, seconds: float) -> None:
        """Sleep on the clock; return early when stopping."""
        sleep = asyncio.ensure_future(self._clock.sleep(seconds))
        stopper = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({sleep, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleep.cancel()
            stopper.cancel()

    async def _ensure(self, name: str, role: str) -> bool:
        """Create Lease ``name`` (no holder) with the group's labels unless it exists."""
        cfg = self.config
        try:
            await self._client.get(LEASE, name, cfg.namespace)
            return True
        except rclient.ApiError as e:
            if not e.not_found:
                log.warning("could not read Lease %s/%s: %s", cfg.namespace, name, e)
                return False
        except Exception as e:
            log.warning("could not read Lease %s/%s: %r", cfg.namespace, name, e)
            return False
        meta: dict[str, Any] = {
            "name": name,
            "namespace": cfg.namespace,
            "labels": {GROUP_LABEL: cfg.group, ROLE_LABEL: role},
            "annotations": {SHARDS_ANNOTATION: str(cfg.partitions)},
        }
        body = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": meta,
            "spec": {"leaseDurationSeconds": max(1, math.ceil(cfg.lease_duration))},
        }
        try:
            await self._client.create(LEASE, body, cfg.namespace)
        except rclient.ApiError as e:
            if e.status != 409:  # 409: another replica created it first
                log.warning("could not create Lease %s/%s: %s", cfg.namespace, name, e)
                return False
        except Exception as e:
            log.warning("could not create Lease %s/%s: %r", cfg.namespace, name, e)
            return False
        return True

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

    # -- membership and rebalancing ---------------------------------------------------------------------

    async def _membership(self) -> None:
        """Hold the member Lease (again after a loss) for as long as the coordinator runs."""
        name = self.config.member_name
        while not self._stopping.is_set():
            if not await self._ensure(name, "member") or self._stopping.is_set():
                await self._wait(self.config.retry_period)
                continue
            self._member = self._elector(self._client, name, member=True)
            await self._member.run(self._member_work)

    async def _member_work(self) -> None:
        if not self._joined.is_set():
            # every live member renews once per member retry period: after two, this replica has
            # seen them all renewing (and replicas started together see each other)
            await self._wait(2 * self.config.member_retry_period)
            self._joined.set()
            p = self.plan()
            log.info(
                "joined the shard group",
                extra={"group": self.config.group, "members": p.members, "share": p.share},
            )
        await asyncio.get_running_loop().create_future()  # until the elector ends membership

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
        leading = {k for k, e in self._electors.items() if e.is_leader()}
        wanted = set(plan(cfg.identity, cfg.partitions, members, holders, leading).acquire) - leading
        if frozenset(wanted) != self._prewarm:
            self._prewarm = frozenset(wanted)
            log.info(
                "listing ahead the partitions about to be taken" if wanted else "nothing listed ahead",
                extra={"partitions": sorted(wanted), "silent": sorted(silent)},
            )
            task = asyncio.create_task(self._narrow(-1), name="shard prewarm")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

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
            if k in self._releasing or k not in self._active:
                continue
            if self._conflict:
                reason = f"members announce other partition counts {self._conflict}"
            else:
                reason = (
                    f"rebalance: fair share {p.share} of {self.config.partitions} partitions over "
                    f"{p.members} members, holding {len(self._active)}"
                )
            self._releasing.add(k)
            task = asyncio.create_task(self._give_up(k, reason), name=f"shard {k} give up")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _give_up(self, k: int, reason: str) -> None:
        try:
            await self._drop(k, reason)
            elector = self._electors.get(k)
            if elector is not None:
                elector.stop()  # releases the Lease (the elector's work, _hold, is already idle)
        finally:
            self._releasing.discard(k)

    # -- one partition --------------------------------------------------------------------------------

    async def _campaign(self, k: int) -> None:
        """Observe partition ``k``'s Lease and hold it when allowed, for as long as the coordinator runs."""
        name = self.config.lease_name(k)
        while not self._stopping.is_set():
            if not await self._ensure(name, "partition") or self._stopping.is_set():
                await self._wait(self.config.retry_period)
                continue
            gate = _Gate(self._client, self, k)
            elector = self._elector(cast(rclient.Client, gate), name)
            gate.elector = elector
            self._electors[k], self._gates[k] = elector, gate
            try:
                await elector.run(functools.partial(self._hold, k))
            except Exception:
                log.exception("partition %d: election failed", k, extra={"partition": k, "lease": name})
                await self._wait(self.config.retry_period)
            finally:
                if self._electors.get(k) is elector:
                    del self._electors[k]

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
            await self._drop(k, _LOST)

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
        self._active.add(k)
        self._set_gauges(k, 1)
        p = self.plan()
        log.info(
            "partition acquired",
            extra={
                "partition": k,
                "lease": self.config.lease_name(k),
                "reason": reason,
                "held": sorted(self._active),
                "share": p.share,
                "members": p.members,
            },
        )
        where = self._in(k)
        for t in self._targets:
            t.enqueue_all(where)

    async def _drop(self, k: int, reason: str) -> None:
        """Stop reconciling partition ``k`` and wait for its in-flight reconciles (idempotent)."""
        if k not in self._active:
            return
        self._active.discard(k)
        self._set_gauges(k, 0)
        where = self._in(k)
        await asyncio.gather(*(t.wait_idle(where) for t in self._targets))
        log.info(
            "partition given up",
            extra={
                "partition": k,
                "lease": self.config.lease_name(k),
                "reason": reason,
                "held": sorted(self._active),
            },
        )
        if self._scope is not None and not self._stopping.is_set():
            # its children leave the cache (memory) after the drain, in the background: the Lease
            # is released without waiting for the re-list
            task = asyncio.create_task(self._narrow(k), name=f"shard {k} narrow")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _narrow(self, k: int) -> None:
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
            wanted = frozenset(self._active | self._acquiring | self._prewarm)
            if wanted != self._selected:
                started = time.monotonic()
                p = self.config.partitions
                # only more partitions (a takeover, a partition listed ahead): list just theirs
                widening = wanted > self._selected
                adding = partition_selector(wanted - self._selected, p) if widening else None
                await self._scope.set_scope(partition_selector(wanted, p), adding=adding)
                log.info(
                    "scope re-listed",
                    extra={
                        "partitions": sorted(wanted),
                        "before": sorted(self._selected),
                        "seconds": round(time.monotonic() - started, 2),
                    },
                )
                self._selected = wanted

    def _in(self, k: int) -> Where:
        partitions = self.config.partitions
        return lambda req: partition_of(req, partitions) == k

    def _set_gauges(self, k: int, value: int) -> None:
        self._partition_gauge.labels(partition=str(k)).set(value)
        self._held_gauge.set(len(self._active))
