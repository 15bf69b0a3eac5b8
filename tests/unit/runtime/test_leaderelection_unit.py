"""The leader elector on a fake API server in fake time (against a real one, short timings:
``tests/integration/runtime/test_leaderelection.py``; across processes of the operator:
``tests/reliability/test_leader_failover.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry

from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.control.leaderelection import LeaderElectionConfig, LeaderElector
from mlops_platform.runtime.transport.resources import LEASE
from mlops_platform.testing import fakes

NAMESPACE, NAME = "ops", "operator"
#: ``mlops-platform run``'s defaults; the contract of a takeover after a crash is lease + 5 s
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 15.0, 10.0, 2.0


def _lease(holder: str, renewed: str) -> dict[str, Any]:
    return {
        "apiVersion": LEASE.api_version,
        "kind": LEASE.kind,
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": int(LEASE_DURATION),
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": renewed,
            "leaseTransitions": 0,
        },
    }


async def _yield_to_tasks(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def _standby(client: fakes.FakeClient, clock: FakeClock) -> AsyncIterator[LeaderElector]:
    """A candidate at the longest jitter (every retry 2.2 x 2 s = 4.4 s), after its first attempt."""
    config = LeaderElectionConfig(NAMESPACE, NAME, "standby_2", LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
    standby = LeaderElector(client, config, registry=CollectorRegistry(), clock=clock, rand=lambda: 1.0)
    task = asyncio.create_task(standby.run(asyncio.Event().wait))
    try:
        await _yield_to_tasks()
        yield standby
    finally:
        standby.stop()
        clock.step(RENEW_DEADLINE)
        await _yield_to_tasks()
        await asyncio.wait_for(task, 5)


async def test_a_crashed_leader_is_replaced_within_lease_duration_plus_5_s_with_the_default_timing() -> None:
    """Worst case of the jitter (every retry 2.2 x 2 s = 4.4 s): the standby observes the record,
    the leader renews once more right after and dies; the standby sees that renewal only at its
    next retry (4.4 s later), from when the record is valid 15 s. At its jittered retries it would
    look at 17.6 s and 22.0 s: 21.9 s after the crash, beyond lease + 5 s. It looks again just after
    the expiry instead."""
    client, clock = fakes.FakeClient(), FakeClock()
    await client.create(LEASE, _lease("leader_1", "2026-01-01T00:00:01.000000Z"), NAMESPACE)
    async with _standby(client, clock) as standby:  # its first attempt, at 0: held by the leader
        assert standby.leader_identity == "leader_1" and not standby.is_leader()
        clock.step(0.1)
        await client.replace(LEASE, _lease("leader_1", "2026-01-01T00:00:02.000000Z"))  # then it dies
        died = clock.now()
        while not standby.is_leader():
            assert clock.now() - died < 60, "never took over"
            clock.step(0.05)
            await _yield_to_tasks()
        took = clock.now() - died
        assert took <= LEASE_DURATION + 5, f"took over {took:.2f} s after the crash"
        # and not before the record expired: 15 s after the standby observed the last renewal (4.4 s)
        assert took >= 4.4 + LEASE_DURATION - 0.1 - 0.05, took
        spec = (await client.get(LEASE, NAME, NAMESPACE))["spec"]
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("standby_2", 1)


async def test_a_standby_of_a_live_leader_reads_the_lease_once_per_jittered_retry() -> None:
    """Cutting the wait short to the record's expiry costs no extra reads while the leader renews:
    every read sees a new renewal, so the expiry is a whole lease duration away."""
    client, clock = fakes.FakeClient(), FakeClock()
    await client.create(LEASE, _lease("leader_1", "2026-01-01T00:00:00.000000Z"), NAMESPACE)
    async with _standby(client, clock) as standby:
        for tenth in range(1, 601):  # the leader renews every second for a minute
            clock.step(0.1)
            if tenth % 10 == 0:
                renewed = f"2026-01-01T00:01:{tenth // 10:02d}.000000Z"
                await client.replace(LEASE, _lease("leader_1", renewed))
            await _yield_to_tasks()
        assert not standby.is_leader()
        reads = [c for c in client.calls if c.verb == "get"]
        assert 1 + 60 // 4.5 <= len(reads) <= 1 + 60 / 4.4, len(reads)  # at 0 and every 4.4 s
