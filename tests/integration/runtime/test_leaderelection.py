"""Lease-based leader election against a real API server (short durations: 3 s / 2 s / 0.5 s)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from mlops_platform.runtime.control.leaderelection import JITTER_FACTOR, LeaderElectionConfig, LeaderElector
from mlops_platform.runtime.transport.client import JSON, Client
from mlops_platform.runtime.transport.resources import LEASE
from mlops_platform.testing import wait

LEASE_NAME = "test-election"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 0.5
#: how long the tests wait for anything: well beyond every bound they assert, so that a slow
#: election fails on the asserted contract (with the time it took), not on the wait's own timeout
PATIENCE = 3 * LEASE_DURATION
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@dataclass
class Candidate:
    elector: LeaderElector
    task: asyncio.Task[None]
    registry: CollectorRegistry
    started: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    work_cancelled: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def campaign(admin_client: Client, namespace: str) -> AsyncIterator[Callable[[str, bool], Candidate]]:
    candidates: list[Candidate] = []

    def start(identity: str, release_on_cancel: bool = True) -> Candidate:
        config = LeaderElectionConfig(
            namespace, LEASE_NAME, identity, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD, release_on_cancel
        )
        registry = CollectorRegistry()  # one per candidate, as one per process in production
        elector = LeaderElector(admin_client, config, registry=registry)
        started, stopped, cancelled = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def lead() -> None:
            started.set()
            try:
                await asyncio.Event().wait()  # the controllers would run here
            finally:
                cancelled.set()

        task = asyncio.create_task(elector.run(lead, stopped.set))
        candidate = Candidate(elector, task, registry, started, stopped, cancelled)
        candidates.append(candidate)
        return candidate

    yield start
    for c in candidates:
        c.task.cancel()
    await asyncio.gather(*(c.task for c in candidates), return_exceptions=True)


def master_status(candidate: Candidate) -> float | None:
    return candidate.registry.get_sample_value("leader_election_master_status", {"name": LEASE_NAME})


async def lease(client: Client, namespace: str) -> JSON:
    return await client.get(LEASE, LEASE_NAME, namespace)


async def leader_of(*candidates: Candidate) -> Candidate:
    seen: list[int] = []  # how many led at each look: asserted outside the probe, which retries errors

    def probe() -> Candidate | None:
        leaders = [c for c in candidates if c.elector.is_leader()]
        seen.append(len(leaders))
        return leaders[0] if leaders else None

    leader = await wait.until(probe, timeout=PATIENCE, interval=0.05, what="a leader")
    assert max(seen) == 1, f"two leaders at once: {seen}"
    return leader


async def two_candidates(
    campaign: Callable[[str, bool], Candidate], release: bool
) -> tuple[Candidate, Candidate, Candidate, Candidate]:
    """Candidates a and b campaigning (``release``: release the Lease on a stop); once one leads:
    a, b, the leader and the follower."""
    a, b = campaign("candidate-a", release), campaign("candidate-b", release)
    leader = await leader_of(a, b)
    return a, b, leader, b if leader is a else a


async def test_exactly_one_of_two_candidates_leads(
    campaign: Callable[[str, bool], Candidate], admin_client: Client, namespace: str
) -> None:
    _, _, leader, follower = await two_candidates(campaign, True)
    await asyncio.wait_for(leader.started.wait(), timeout=5)
    # the follower has seen the Lease held by the leader and stays a follower

    async def follower_sees_leader() -> bool:
        return follower.elector.leader_identity == leader.elector.config.identity

    await wait.until(follower_sees_leader, timeout=PATIENCE, what="the follower observing the leader")
    assert not follower.elector.is_leader()
    assert not follower.started.is_set()
    assert (master_status(leader), master_status(follower)) == (1.0, 0.0)

    spec = (await lease(admin_client, namespace))["spec"]
    assert spec["holderIdentity"] == leader.elector.config.identity
    assert spec["leaseDurationSeconds"] == 3
    assert spec.get("leaseTransitions", 0) == 0
    assert MICRO_TIME.match(spec["acquireTime"])
    assert MICRO_TIME.match(spec["renewTime"])

    read_at = asyncio.get_running_loop().time()

    async def renewed() -> bool:
        now = (await lease(admin_client, namespace))["spec"]
        return bool(now["renewTime"] > spec["renewTime"] and now["acquireTime"] == spec["acquireTime"])

    await wait.until(renewed, timeout=PATIENCE, interval=0.05, what="the leader renewing its lease")
    # it renews every retry period; a leader that went renew_deadline without it would have given up
    assert asyncio.get_running_loop().time() - read_at < RENEW_DEADLINE
    assert not follower.elector.is_leader()


async def test_graceful_stop_releases_and_the_standby_takes_over_quickly(
    campaign: Callable[[str, bool], Candidate], admin_client: Client, namespace: str
) -> None:
    a, b, leader, follower = await two_candidates(campaign, True)
    loop = asyncio.get_running_loop()
    stopped_at = loop.time()
    leader.elector.stop()
    await asyncio.wait_for(leader.task, timeout=PATIENCE)
    # the work is cancelled at once and the release is one write, bounded by renew_deadline
    assert loop.time() - stopped_at < RENEW_DEADLINE
    assert leader.work_cancelled.is_set()
    assert leader.stopped.is_set()
    assert not leader.elector.is_leader()
    assert master_status(leader) == 0.0

    assert await leader_of(a, b) is follower
    assert master_status(follower) == 1.0
    # released: no need to wait for expiry (acquire retries every 0.5-1.1 s)
    assert loop.time() - stopped_at < LEASE_DURATION
    spec = (await lease(admin_client, namespace))["spec"]
    assert spec["holderIdentity"] == follower.elector.config.identity
    assert spec["leaseTransitions"] == 1
    assert spec["leaseDurationSeconds"] == 3


async def test_a_dead_leader_is_replaced_after_its_lease_expires(
    campaign: Callable[[str, bool], Candidate], admin_client: Client, namespace: str
) -> None:
    a, b, leader, follower = await two_candidates(campaign, False)
    before = (await lease(admin_client, namespace))["spec"]
    loop = asyncio.get_running_loop()
    died_at = loop.time()
    leader.task.cancel()  # crash: no release
    await asyncio.gather(leader.task, return_exceptions=True)
    assert (await lease(admin_client, namespace))["spec"]["holderIdentity"] == before["holderIdentity"]

    assert await leader_of(a, b) is follower
    elapsed = loop.time() - died_at
    # Expiry counts from when the follower *observed* the last renewal (at most one jittered
    # retry after it), and the takeover happens at the follower's next jittered retry.
    jittered_retry = (1 + JITTER_FACTOR) * RETRY_PERIOD
    assert LEASE_DURATION - RETRY_PERIOD - 0.3 <= elapsed <= LEASE_DURATION + 2 * jittered_retry + 0.5
    spec = (await lease(admin_client, namespace))["spec"]
    assert spec["holderIdentity"] == follower.elector.config.identity
    assert spec["leaseTransitions"] == before.get("leaseTransitions", 0) + 1
    assert spec["acquireTime"] > before["acquireTime"]


async def test_the_leader_gives_up_when_it_cannot_renew(
    campaign: Callable[[str, bool], Candidate], admin_client: Client, namespace: str
) -> None:
    leader = campaign("candidate-a", True)
    assert await leader_of(leader) is leader

    async def intrude() -> bool:  # grab the Lease behind the leader's back: renewals now fail
        current = await lease(admin_client, namespace)
        current["spec"] |= {"holderIdentity": "intruder", "leaseDurationSeconds": 3600}
        await admin_client.replace(LEASE, current)  # 409 if the leader renewed meanwhile: retried
        return True

    await wait.until(intrude, timeout=PATIENCE, interval=0.05, what="taking the Lease over")
    loop = asyncio.get_running_loop()
    taken_at = loop.time()
    await asyncio.wait_for(leader.task, timeout=PATIENCE)
    # renewals fail from the take-over on: the renewal round starting at most one retry period
    # later gives up after renew_deadline, which it checks once per retry period
    assert loop.time() - taken_at <= RENEW_DEADLINE + 2 * RETRY_PERIOD + 1.0
    assert not leader.elector.is_leader()
    assert leader.work_cancelled.is_set()
    assert leader.stopped.is_set()
    # the loser does not release a Lease it no longer holds
    assert (await lease(admin_client, namespace))["spec"]["holderIdentity"] == "intruder"
