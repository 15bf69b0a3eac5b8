"""Webhook failover: two operator replicas serve the conversion webhook behind one address and the one
the API server is talking to is SIGKILLed or SIGTERMed during a loop of conversions; the API
server's conversions keep succeeding through the other. SIGKILL (a crash): the requests in flight
on the victim fail once and succeed when asked again, none fails twice. SIGTERM (a rolling update):
the victim drains its webhook and not one client request fails or is retried.

Both are ``mlops-platform run`` processes (one leads, one stands by: both serve the webhook), with
self-managed certificates in one Secret (they agree on one CA), listening on one loopback port with
``--webhook-reuse-port`` (SO_REUSEPORT: the kernel spreads the API server's connections over them, as
the webhook Service spreads them over two pods). The victim is whichever has answered more
conversions when the load is running: it holds the API server's connections. After the kill the
load goes on until the survivor has answered more conversions and every worker has finished cycles
begun after the kill. The session's webhook is paused meanwhile and the CRD restored afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2 as httpx
import pytest

from mlops_platform.api import crd
from mlops_platform.deploy import crdinstall
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import conversionload, operator, plugin, ports, wait, webhook

SECRET = ("mlops-system", "mlops-platform-webhook-tls-failover")
ELECTION_ID = "webhook-failover-test"
WORKERS = 4
#: after a SIGKILL, a request that fails because the replica answering its conversion died is asked
#: again this often, after the load's backoff (documented bound: docs/webhook-tls.md); each worker has
#: one request in flight, so at most WORKERS requests are retried. After a SIGTERM: none.
RETRIES = 1
#: conversions the survivor must answer after the kill, and cycles each worker runs after it
AFTER_KILL = 20
CYCLES_AFTER = 2


SERVED_SAMPLE = 'controller_runtime_webhook_requests_total{code="200",webhook="/convert"}'


async def served(replica: operator.Process) -> float:
    """Conversions ``replica`` answered 200 (its controller-runtime webhook counter); 0 while its
    metrics do not answer (it has just started, or it is gone)."""
    try:
        return await replica.metric(SERVED_SAMPLE) or 0.0
    except httpx.HTTPError:
        return 0.0


@contextlib.asynccontextmanager
async def _replicas(
    kube_cluster: Path, c: rclient.Client, namespace: str, tmp_path: Path
) -> AsyncIterator[list[operator.Process]]:
    """Two replicas reconciling ``namespace`` (not the load's: their status writes would make the
    load's updates conflict), serving the webhook on one port."""
    port = ports.free_port()
    address = f"https://127.0.0.1:{port}/convert"
    await crdinstall.ensure_namespace(c, SECRET[0])
    await crd.install(c, webhook_url=address)
    replicas: list[operator.Process] = []
    flags = (
        "--namespace", namespace,
        "--leader-elect", "--leader-election-namespace", namespace,
        "--leader-election-id", ELECTION_ID,
        "--no-readiness-requires-leadership",
        "--no-monitoring",
        "--webhook-bind-address", f"127.0.0.1:{port}",
        "--webhook-reuse-port",
        "--webhook-secret", "/".join(SECRET),
    )  # fmt: skip
    try:
        for name in ("a", "b"):
            replicas.append(operator.start(kube_cluster, tmp_path / f"operator-{name}.log", *flags))

        async def both_ready() -> bool:
            for r in replicas:
                assert r.proc.poll() is None, f"{r.log.name} exited {r.proc.returncode}: {r.tail()}"
            return all(await asyncio.gather(*(r.ready() for r in replicas)))

        try:
            await wait.until(both_ready, timeout=90, retry_on=(), what="both replicas ready")
        except TimeoutError as e:
            raise AssertionError(
                "\n".join([str(e), *(f"--- {r.log.name}:\n{r.tail(40)}" for r in replicas)])
            ) from e

        async def converting() -> bool:
            return await webhook.ca_bundle(c) == await webhook.stored_bundle(
                c, SECRET
            ) and await crd.converts(c, namespace)

        await wait.until(converting, timeout=60, what="the API server converts through the replicas")
        yield replicas
    finally:
        await asyncio.gather(*(r.stop(20) for r in replicas))


@dataclasses.dataclass
class _Outcome:
    load: conversionload.ConversionLoad
    victim: operator.Process
    summary: str
    cycles_after: int


async def _take_away_the_serving_replica(
    c: rclient.Client, namespace: str, kube_cluster: Path, tmp_path: Path, sig: signal.Signals, retries: int
) -> _Outcome:
    """Run the load on two replicas, send ``sig`` to the one that has answered more conversions, go
    on until the survivor has answered AFTER_KILL more and every worker has run CYCLES_AFTER more
    cycles; the load, the victim and a summary of the run."""
    async with webhook.paused(c):
        await webhook.delete_secret(c, SECRET)
        try:
            async with (
                plugin.temporary_namespace(c, "failover-operators") as operators,
                _replicas(kube_cluster, c, operators, tmp_path) as replicas,
                rclient.Client.from_kubeconfig(kube_cluster, max_retries=3) as lc,
            ):
                load = conversionload.ConversionLoad(
                    lc, namespace, cycles_after=CYCLES_AFTER, retries=retries
                )
                workers = [asyncio.create_task(load.worker(k)) for k in range(WORKERS)]
                try:
                    # both serve once the load runs; the victim holds the API server's connections

                    async def total() -> bool:
                        return sum(await asyncio.gather(*(served(r) for r in replicas))) >= 50

                    await wait.until(total, timeout=60, what="50 conversions")
                    counts = {r.log.name: await served(r) for r in replicas}
                    victim, survivor = sorted(replicas, key=lambda r: counts[r.log.name], reverse=True)
                    victim_served = counts[victim.log.name]
                    before, cycles = await served(survivor), load.cycles
                    victim.kill(sig)
                    killed = time.monotonic()
                    await asyncio.to_thread(victim.proc.wait)

                    async def survived() -> bool:
                        return await served(survivor) >= before + AFTER_KILL

                    await wait.until(
                        survived, timeout=60, what=f"{AFTER_KILL} conversions by the survivor after the kill"
                    )
                    load.stopping = True
                    await asyncio.wait_for(asyncio.gather(*workers), 60)
                    ran_after = time.monotonic() - killed
                finally:
                    for task in workers:
                        task.cancel()
                    await asyncio.gather(*workers, return_exceptions=True)
                after = await served(survivor) - before
                summary = (
                    f"victim {victim.log.name} had answered {victim_served:.0f} conversions, the survivor "
                    f"{before:.0f} before the {sig.name} and {after:.0f} in the "
                    f"{ran_after:.1f}s after it; {load.requests} client requests, {load.cycles} cycles "
                    f"({load.cycles - cycles} after the {sig.name}); answers {dict(load.answers)}; "
                    f"retried {len(load.retried)}: {load.retried[:WORKERS]}"
                )
                print(f"\n{summary}")
                assert victim_served > 0, summary  # the signal hit a replica that was serving
                return _Outcome(load, victim, summary, load.cycles - cycles)
        finally:
            await webhook.delete_secret(c, SECRET)


@pytest.mark.timeout(300)
async def test_a_killed_serving_replica_fails_its_conversions_in_flight_once(
    admin_client: rclient.Client, namespace: str, kube_cluster: Path, tmp_path: Path
) -> None:
    """SIGKILL (a crash, a node lost): the conversions in flight on the victim fail once, the API
    server's connections to it reset under them, and each succeeds on one retry after a backoff
    (the documented bound, docs/webhook-tls.md); no request fails twice, every one after succeeds."""
    run = await _take_away_the_serving_replica(
        admin_client, namespace, kube_cluster, tmp_path, signal.SIGKILL, RETRIES
    )
    load, summary = run.load, run.summary
    assert not load.failures, f"{len(load.failures)} failed: {load.failures[:10]}; {summary}"
    # only the requests in flight at the kill failed once, each within the kill's second
    assert len(load.retried) <= WORKERS, summary
    # the API server's own words for a connection that died under a request: Go's net/http says
    # "server closed idle connection" when the victim's socket closed as a request went out on it
    # (a POST is not retried by Go itself)
    lost = ("connection reset", "EOF", "refused", "broken pipe", "server closed idle connection")
    assert all(any(w in r for w in lost) for r in load.retried), summary
    assert run.cycles_after >= WORKERS * CYCLES_AFTER, summary


@pytest.mark.timeout(300)
async def test_a_terminated_serving_replica_drains_and_fails_no_conversion(
    admin_client: rclient.Client, namespace: str, kube_cluster: Path, tmp_path: Path
) -> None:
    """SIGTERM (a rolling update of the operator): the victim drains its webhook (stops listening,
    answers every request on the connections it has, each with Connection: close, closes the idle
    ones only at the end of the grace) and exits cleanly; NO client request fails, none is retried."""
    run = await _take_away_the_serving_replica(
        admin_client, namespace, kube_cluster, tmp_path, signal.SIGTERM, retries=0
    )
    load, summary = run.load, run.summary
    drained = [line for line in run.victim.lines() if line.get("msg") == "webhook drained"]
    print(f"victim's drain: {drained}")
    assert not load.failures, f"{len(load.failures)} failed: {load.failures[:10]}; {summary}"
    assert not load.retried, summary
    assert run.victim.proc.returncode == 0, f"{run.victim.tail()}; {summary}"
    # it let go of every connection without cutting one in a handshake or a request
    assert len(drained) == 1 and drained[0]["cut"] == 0, f"{drained}; {summary}"
    assert run.cycles_after >= WORKERS * CYCLES_AFTER, summary
