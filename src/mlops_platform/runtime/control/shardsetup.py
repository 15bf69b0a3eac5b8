"""How a manager (:mod:`~mlops_platform.runtime.control.manager`) becomes one replica of a shard
group (``Options.shards > 1``): wiring only, no I/O.

Contract (:func:`setup`): the group is named after ``leader_election_id`` (required) in
``leader_election_namespace``, with the manager's identity, Lease timing and cache sync timeout.
Each controllers' primary kind is scoped in the cache and kept labelled by one
:class:`~.labeler.BucketLabeler` (one per kind, however many controllers share it), so a replica
watches only its partitions' primary objects too. The
:class:`~.sharding.ShardCoordinator` drives the controllers and the labelers and narrows the cache;
every controller's ``ownership`` becomes the coordinator's :meth:`~.sharding.ShardCoordinator.owns`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.control import controller as rcontroller
from mlops_platform.runtime.control import labeler, shardgroup, sharding
from mlops_platform.runtime.transport import client as rclient

if TYPE_CHECKING:
    from mlops_platform.runtime.control.manager import Options

__all__ = ["setup"]


def setup(
    client: rclient.Client,
    options: Options,
    cache: rcache.Cache,
    controllers: Sequence[rcontroller.Controller],
    registry: CollectorRegistry,
) -> tuple[sharding.ShardCoordinator, list[labeler.BucketLabeler]]:
    """The coordinator of this replica and the labelers of the primary kinds (see the module docstring)."""
    o = options
    if not o.leader_election_id:
        raise ValueError("sharding needs leader_election_id (the shard Leases are named after it)")
    config = shardgroup.ShardConfig(
        namespace=o.leader_election_namespace,
        group=o.leader_election_id,
        identity=o.identity,
        partitions=o.shards,
        shard_id=o.shard_id,
        lease_duration=o.lease_duration,
        renew_deadline=o.renew_deadline,
        retry_period=o.retry_period,
        sync_timeout=o.cache_sync_timeout,
    )
    # the primary objects are narrowed server-side like the children: each replica watches
    # only its partitions' ones, which a labeler per primary kind keeps labelled (labeler.py)
    labelers: list[labeler.BucketLabeler] = []
    for c in controllers:
        if any(lab.resource == c.primary for lab in labelers):
            continue
        cache.scope_also(c.primary)
        labelers.append(
            labeler.BucketLabeler(
                client,
                c.primary,
                owns=lambda req: coordinator.owns(req),
                primary=cache.informer_for(c.primary),
                label_selector=cache.own_selector(c.primary),
                registry=registry,
            )
        )
    coordinator = sharding.ShardCoordinator(
        client,
        config,
        [*controllers, *labelers],
        scope=cache,
        registry=registry,
    )
    for c in controllers:
        c.ownership = coordinator.owns
    return coordinator, labelers
