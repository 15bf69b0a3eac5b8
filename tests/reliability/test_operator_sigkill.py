"""Scenario 3, operator SIGKILL: the operator process is killed at random moments of rollouts and a
new one takes over; after every restart everything converges, with no child lost, duplicated or
orphaned, and no status ever went back to an older generation.

The operator is ``mlops-platform run`` as a process of its own (admin kubeconfig), watching the
test's namespace, with leader election in it (4 s / 3 s / 1 s: a SIGKILLed leader does not release
its Lease, so the new process takes over once it has seen the Lease unrenewed for 4 s). One
repetition: a rollout (a new ``modelUri`` for every InferenceService, written in a random order
while the operator works), a SIGKILL once the operator has finished a random number ``k`` of
reconciles since the rollout began (0 <= k < objects / 2, read from its /metrics), a new process at
once, then :func:`reliability.converge` from the kill (every kill, counted or not, must converge).
Only a kill that found the namespace not converged counts as a fault during a rollout (the metrics
lag behind the operator on a loaded machine: a late kill can find everything done); the test
rolls out again until ``KILLS`` kills counted, at most ``ATTEMPTS`` rollouts.
The random moments come from a seeded ``random.Random`` (seed printed; ``MLOPS_RELIABILITY_SEED``
replays one). Run with ``-s`` for the figures of every kill.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import isvc, operator, reliability, wait
from mlops_platform.testing.scenario import Scenario, expected, model_uri, one_replica

ISVC = isvc.RESOURCE  # v1alpha1 objects: every write goes through the conversion webhook
OBJECTS = reliability.scale(50, 10)
KILLS = reliability.repetitions(20, 2)
#: rollouts at most, to land KILLS kills with reconciles in flight
ATTEMPTS = 2 * KILLS + 2
LEASE_ID = "reliability-sigkill"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4, 3, 1
#: acceptance bound of one restart, from the SIGKILL to a converged namespace: the takeover (lease
#: expiry seen by the new process, about 4-7 s) and the rest of the rollout (the wait's timeout is longer)
CONVERGE_WITHIN = 60.0
CONVERGE_TIMEOUT = 180.0
#: InferenceServices written at once by the rollout
WRITERS = 5


@dataclasses.dataclass
class Kill:
    """One repetition's figures."""

    k: int  # reconciles (since the rollout began) the kill waited for
    reconciles: int  # ... and how many the victim had finished when last read before the kill
    unsettled: int  # InferenceServices not converged just after the kill
    takeover_s: float  # SIGKILL -> the new process ready (leading)
    converge_s: float  # SIGKILL -> the namespace converged


async def _rollout(c: rclient.Client, ns: str, names: list[str], rollout: int, rng: random.Random) -> None:
    """A new modelUri for every name, in a random order, ``WRITERS`` at a time."""
    gate = asyncio.Semaphore(WRITERS)

    async def write(name: str) -> None:
        async with gate:
            await c.patch(ISVC, name, {"spec": {"modelUri": model_uri(name, rollout)}}, namespace=ns)

    await asyncio.gather(*(write(n) for n in rng.sample(names, len(names))))


async def _ready_after(proc: operator.Process, since: float) -> float:
    """Seconds from ``since`` until ``proc`` reports ready (with leader election: it leads)."""
    await wait.until(proc.ready, timeout=CONVERGE_TIMEOUT, interval=0.1, what="the new operator ready")
    return time.monotonic() - since


async def _kill_during_rollout(
    c: rclient.Client,
    ns: str,
    names: list[str],
    rollout: int,
    rng: random.Random,
    current: operator.Process,
    group: operator.Replicas,
) -> tuple[Kill, operator.Process, reliability.Converged]:
    """Roll out, SIGKILL ``current`` once it has finished a random number ``k < objects`` of
    reconciles since the rollout began (its /metrics: no watch lag; every object needs at least two
    for the new spec, its Deployment and status, then Ready), start the next process, converge.
    The next process and the figures."""
    want = expected({n: model_uri(n, rollout) for n in names})
    k = rng.randrange(max(1, len(names) // 2))  # one reconcile per object can settle it: kill early
    before = await current.reconciles()
    done = 0
    writing = asyncio.create_task(_rollout(c, ns, names, rollout, rng))

    async def reached() -> bool:
        nonlocal done
        if writing.done():
            writing.result()  # a failed write fails the test here
        done = await current.reconciles() - before
        return done >= k

    await wait.until(
        reached,
        timeout=CONVERGE_TIMEOUT,
        interval=0.02,
        retry_on=(),
        what=f"{k} reconciles of rollout {rollout}",
    )
    assert current.proc.poll() is None, f"the operator exited on its own: {current.proc.returncode}"
    current.kill()
    killed = time.monotonic()
    successor = group.add()
    at_kill = await reliability.audit(c, ns, want)
    await writing
    ready = asyncio.create_task(_ready_after(successor, killed))
    converged = await reliability.converge(c, ns, want, timeout=CONVERGE_TIMEOUT, since=killed)
    unsettled = len(at_kill.unsettled) + len(at_kill.lost)
    kill = Kill(k, done, unsettled, await ready, converged.seconds)
    assert converged.audit.ok, f"after kill {rollout}: {converged.audit.summary()}"
    return kill, successor, converged


async def test_operator_sigkill_during_rollouts(scenario: Scenario) -> None:
    c, ns = scenario.client, scenario.namespace
    seed, rng = scenario.seeded("operator SIGKILL", f"{OBJECTS} objects, {KILLS} kills")
    names = [f"sigkill-{i:02d}" for i in range(OBJECTS)]
    for name in names:
        await c.create(ISVC, one_replica(name, modelUri=model_uri(name, 0)), ns)
    kills: list[Kill] = []  # the kills that found reconciles in flight
    missed = 0
    elected = operator.elected(ns, LEASE_ID, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
    async with (
        operator.replicas(scenario.kubeconfig, scenario.logs, *elected) as group,
        reliability.status_history(c, ns) as history,
    ):
        current = group.add()
        initial = expected({n: model_uri(n, 0) for n in names})
        converged = await reliability.converge(c, ns, initial, timeout=CONVERGE_TIMEOUT)
        assert converged.audit.ok, f"before the first kill: {converged.audit.summary()}"
        rollout = 0
        while len(kills) < KILLS:
            # a kill that found nothing in flight (the reconciles read from /metrics lag behind the
            # operator's on a loaded machine) is no fault during a rollout: it does not count, and
            # another rollout is killed; at most ATTEMPTS rollouts in all
            rollout += 1
            assert rollout <= ATTEMPTS, (
                f"seed {seed}: only {len(kills)} of {rollout - 1} kills found reconciles in flight"
            )
            try:
                kill, current, converged = await _kill_during_rollout(
                    c, ns, names, rollout, rng, current, group
                )
            except AssertionError as e:
                raise AssertionError(f"seed {seed}: {e}") from e
            print(f"kill {rollout}: {kill}")
            assert kill.converge_s <= CONVERGE_WITHIN, (
                f"kill {rollout}: converged {kill.converge_s:.1f} s after the SIGKILL (seed {seed})"
            )
            if kill.unsettled:
                kills.append(kill)
            else:
                missed += 1
        regressions = history.regressions()
        status_events = history.events
    assert not regressions, f"status went back (seed {seed}): {regressions}"
    worst = max(x.converge_s for x in kills)
    takeover = max(x.takeover_s for x in kills)
    unsettled = [x.unsettled for x in kills]
    print(
        f"operator SIGKILL: {KILLS} kills in flight ({missed} more found nothing left), {OBJECTS} "
        f"objects, {status_events} status events watched; "
        f"max converge {worst:.1f} s, max takeover {takeover:.1f} s; unsettled at the kills {unsettled}"
    )
    scenario.report(
        "3. Operator SIGKILL",
        KILLS,
        f"{KILLS} SIGKILLs of the leading operator process during rollouts of {OBJECTS} objects",
        converged,
        f"seed {seed}; {missed} more kills found the rollout done (not counted); "
        f"{min(unsettled)}-{max(unsettled)} of {OBJECTS} InferenceServices unsettled "
        f"at a kill; new leader ready within {takeover:.1f} s (lease {LEASE_DURATION} s); no status "
        f"regression in {status_events} status events",
        max_converge_s=worst,
    )
