"""The membership of one shard replica (:mod:`~mlops_platform.runtime.control.sharding`): its
member Lease, whether it has joined the group, and how it leaves.

Contract (dynamic mode, ``shard_id=None``; in static mode a replica is joined at once and holds no
member Lease):

- **Member Lease.** :meth:`Membership.hold` holds ``<group>-member-<identity>`` (created without a
  holder unless it exists, :func:`~.shardgroup.ensure_lease`), again after a loss, until the
  coordinator stops; its elector renews it every
  :attr:`~.shardgroup.ShardConfig.member_retry_period`.
- **Joining.** :attr:`Membership.joined` is set once the member Lease is held and two member retry
  periods have passed: every live member renews once per period, so the replica has seen them all
  (and replicas started together see each other first). One JSON log line says so, with the
  group, the members and the fair share then.
- **Leaving.** :meth:`Membership.leave` stops the elector (which releases the Lease), awaits the
  holding task and deletes the member Lease (best effort: an expired member Lease counts for
  nobody).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from mlops_platform.runtime.clock import Clock
from mlops_platform.runtime.control import leaderelection, partitioning, partitionleases, shardgroup
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport.resources import LEASE

__all__ = ["Membership"]

log = logging.getLogger("mlops_platform.runtime.control.sharding")


class Membership:
    """This replica's member Lease (see the module docstring); ``elector`` makes the member Lease's
    elector, ``plan`` is the coordinator's decision (for the log line on joining)."""

    def __init__(
        self,
        client: rclient.Client,
        config: shardgroup.ShardConfig,
        elector: Callable[[], leaderelection.LeaderElector],
        plan: Callable[[], partitioning.Plan],
        *,
        clock: Clock,
        stopping: asyncio.Event,
    ) -> None:
        self._client, self.config, self._clock, self._stopping = client, config, clock, stopping
        self._elector, self._plan = elector, plan
        self._member: leaderelection.LeaderElector | None = None
        self.joined = asyncio.Event()  # campaigning allowed (static mode: at once)
        if config.shard_id is not None:
            self.joined.set()

    async def hold(self) -> None:
        """Hold the member Lease (again after a loss) for as long as the coordinator runs."""
        name = self.config.member_name
        while not self._stopping.is_set():
            if (
                not await shardgroup.ensure_lease(self._client, self.config, name, "member")
                or self._stopping.is_set()
            ):
                await self._wait(self.config.retry_period)
                continue
            self._member = self._elector()
            await self._member.run(self._work)

    async def _work(self) -> None:
        if not self.joined.is_set():
            # every live member renews once per member retry period: after two, this replica has
            # seen them all renewing (and replicas started together see each other)
            await self._wait(2 * self.config.member_retry_period)
            self.joined.set()
            p = self._plan()
            log.info(
                "joined the shard group",
                extra={"group": self.config.group, "members": p.members, "share": p.share},
            )
        await asyncio.get_running_loop().create_future()  # until the elector ends membership

    async def leave(self, holding: Sequence[asyncio.Task[None]]) -> None:
        """Release and delete the member Lease (nothing if it was never held); ``holding``: the
        task(s) running :meth:`hold`, awaited once the elector has stopped."""
        if self._member is None:
            return
        self._member.stop()
        await asyncio.gather(*holding, return_exceptions=True)
        try:
            await self._client.delete(LEASE, self.config.member_name, self.config.namespace)
        except Exception as e:  # best effort: an expired member Lease counts for nobody
            log.warning("could not delete the member Lease %s: %r", self.config.member_name, e)

    async def _wait(self, seconds: float) -> None:
        """Sleep on the clock; return early when stopping."""
        await partitionleases.sleep_or_stop(self._clock, self._stopping, seconds)
