"""A shard group (:mod:`~mlops_platform.runtime.control.sharding`): its configuration, the labels of
its Leases, and this replica's view of them.

Contract:

- **Configuration.** :class:`ShardConfig` is a replica's place in the group (namespace, group,
  identity, partition count ``P``, static ``shard_id``) and client-go's Lease timing; it is
  validated when built (label-valid group, ``1 <= P <=`` :data:`~.partitioning.BUCKETS`, the
  elector's timing rules).
- **Leases.** Partition ``k`` is guarded by Lease ``<group>-shard-<k>``; member ``identity`` holds
  ``<group>-member-<identity>``. Every Lease of the group carries the labels :data:`GROUP_LABEL`
  (the group) and :data:`ROLE_LABEL` (``partition`` or ``member``) and announces ``P`` in
  :data:`SHARDS_ANNOTATION`; :func:`ensure_lease` creates one (no holder) unless it exists.
- **The view** (:class:`LeaseView`, an informer event handler). A Lease is live while its record is
  unexpired by the local clock (when this replica last saw the record change, plus
  ``leaseDurationSeconds``: the electors' rule); the server's timestamps are never compared with
  local time. A member counts once this replica has seen it renewed (a member Lease first seen may
  be long dead).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import re
from typing import Any

from mlops_platform.runtime import objects
from mlops_platform.runtime.clock import Clock
from mlops_platform.runtime.control import leaderelection, partitioning
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport.resources import LEASE

__all__ = ["GROUP_LABEL", "ROLE_LABEL", "SHARDS_ANNOTATION", "LeaseView", "ShardConfig", "ensure_lease"]

log = logging.getLogger("mlops_platform.runtime.control.sharding")

GROUP_LABEL = "mlops.platform/shard-group"
ROLE_LABEL = "mlops.platform/shard-role"  # "partition" or "member"
SHARDS_ANNOTATION = "mlops.platform/shards"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_RECORD_KEYS = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")


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
        if not 1 <= self.partitions <= partitioning.BUCKETS:
            raise ValueError(f"partitions must be in [1, {partitioning.BUCKETS}], got {self.partitions}")
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


async def ensure_lease(client: rclient.Client, config: ShardConfig, name: str, role: str) -> bool:
    """Create Lease ``name`` (no holder) with the group's labels unless it exists: whether it does."""
    cfg = config
    try:
        await client.get(LEASE, name, cfg.namespace)
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
        await client.create(LEASE, body, cfg.namespace)
    except rclient.ApiError as e:
        if e.status != 409:  # 409: another replica created it first
            log.warning("could not create Lease %s/%s: %s", cfg.namespace, name, e)
            return False
    except Exception as e:
        log.warning("could not create Lease %s/%s: %r", cfg.namespace, name, e)
        return False
    return True
