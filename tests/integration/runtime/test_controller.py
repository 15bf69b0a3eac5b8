"""Controllers and the manager on the real API server, through the example controller."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2 as httpx
import pytest

from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.control.reconcile import Request, Result
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import operator, requests, wait
from mlops_platform.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "configmap_mirror", ROOT / "examples" / "configmap_mirror.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mirror = _load_example()


def _parent(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {mirror.LABEL: "true"}},
        "data": data,
    }


class Running:
    def __init__(self, mgr: rmanager.Manager, task: asyncio.Task[None], reconciler: Any) -> None:
        self.mgr, self.task, self.reconciler = mgr, task, reconciler


@pytest.fixture
async def running(kube_cluster: Path, namespace: str) -> AsyncIterator[Running]:
    c = rclient.Client.from_kubeconfig(kube_cluster)
    mgr = rmanager.Manager(
        c,
        rmanager.Options(
            namespace=namespace,
            health_probe_address=("127.0.0.1", 0),
            metrics_address=("127.0.0.1", 0),
            leader_election=True,
            leader_election_id="configmap-mirror",
            leader_election_namespace=namespace,
        ),
    )
    reconciler = mirror.setup(mgr, workers=2, fail_names=frozenset({"broken"}))
    task = asyncio.create_task(mgr.run())
    await wait.until(lambda: mgr.is_ready(), timeout=30, what="manager ready")
    yield Running(mgr, task, reconciler)
    mgr.stop()
    await asyncio.wait_for(task, 30)
    await c.close()


async def _mirror_data(c: rclient.Client, ns: str, name: str) -> dict[str, str] | None:
    try:
        return (await c.get(resources.CONFIG_MAP, f"{name}-mirror", ns)).get("data")
    except rclient.ApiError as e:
        if e.not_found:
            return None
        raise


async def test_owned_children_are_created_and_repaired(
    admin_client: rclient.Client, namespace: str, running: Running
) -> None:
    await admin_client.create(resources.CONFIG_MAP, _parent("app", {"k": "v1"}), namespace)
    await wait.until(
        lambda: _eq(_mirror_data(admin_client, namespace, "app"), {"k": "v1"}), what="mirror created"
    )

    # drift on the CHILD: owns() maps it to the parent, which repairs it
    await admin_client.patch(
        resources.CONFIG_MAP, "app-mirror", {"data": {"k": "tampered"}}, namespace=namespace
    )
    await wait.until(
        lambda: _eq(_mirror_data(admin_client, namespace, "app"), {"k": "v1"}), what="drift repaired"
    )
    await admin_client.delete(resources.CONFIG_MAP, "app-mirror", namespace)
    await wait.until(
        lambda: _eq(_mirror_data(admin_client, namespace, "app"), {"k": "v1"}), what="child restored"
    )

    # a parent change follows through
    await admin_client.patch(resources.CONFIG_MAP, "app", {"data": {"k": "v2"}}, namespace=namespace)
    await wait.until(
        lambda: _eq(_mirror_data(admin_client, namespace, "app"), {"k": "v2"}), what="update mirrored"
    )


async def test_a_failing_object_does_not_block_others_and_is_retried_with_backoff(
    admin_client: rclient.Client, namespace: str, running: Running
) -> None:
    await admin_client.create(resources.CONFIG_MAP, _parent("broken", {"x": "1"}), namespace)
    for i in range(5):
        await admin_client.create(resources.CONFIG_MAP, _parent(f"ok-{i}", {"i": str(i)}), namespace)
    for i in range(5):
        await wait.until(
            lambda i=i: _eq(_mirror_data(admin_client, namespace, f"ok-{i}"), {"i": str(i)}), what=f"ok-{i}"
        )
    q = running.mgr.controllers[0].queue
    from mlops_platform.runtime.control.reconcile import Request

    await wait.until(lambda: q.num_requeues(Request(namespace, "broken")) >= 3, what="broken retried")
    assert await _mirror_data(admin_client, namespace, "broken") is None


async def test_steady_state_makes_no_writes(
    admin_client: rclient.Client, namespace: str, running: Running
) -> None:
    await admin_client.create(resources.CONFIG_MAP, _parent("calm", {"a": "b"}), namespace)
    await wait.until(lambda: _eq(_mirror_data(admin_client, namespace, "calm"), {"a": "b"}), what="mirror")
    c = running.mgr.client
    writes = _writes(c)
    for informer in running.mgr.cache.informers:
        informer.resync()  # every cached object is reconciled again
    ctrl = running.mgr.controllers[0]
    await wait.until(lambda: _idle(ctrl), interval=0.05, what="queue drained, no reconcile running")
    assert _writes(c) == writes


def _writes(c: rclient.Client) -> int:
    return sum(n for (verb, _, _), n in c.requests.items() if verb in requests.WRITE_VERBS)


async def _idle(ctrl: Any) -> bool:
    return not ctrl.queue.len() and not ctrl.metrics.active_workers.labels(ctrl.name)._value.get()


async def test_metrics_and_probes(admin_client: rclient.Client, namespace: str, running: Running) -> None:
    await admin_client.create(resources.CONFIG_MAP, _parent("m", {"a": "b"}), namespace)
    await wait.until(lambda: _eq(_mirror_data(admin_client, namespace, "m"), {"a": "b"}), what="mirror")
    async with httpx.AsyncClient() as http:
        health = await http.get(f"http://127.0.0.1:{running.mgr.health_port}/healthz")
        ready = await http.get(f"http://127.0.0.1:{running.mgr.health_port}/readyz")
        text = (await http.get(f"http://127.0.0.1:{running.mgr.metrics_port}/metrics")).text
    assert health.status_code == 200
    assert ready.status_code == 200
    for name in (
        'controller_runtime_reconcile_total{controller="configmap-mirror",result="success"}',
        'controller_runtime_reconcile_time_seconds_count{controller="configmap-mirror"}',
        'workqueue_adds_total{controller="configmap-mirror",name="configmap-mirror"}',
        'workqueue_depth{controller="configmap-mirror",name="configmap-mirror"}',
        'workqueue_queue_duration_seconds_count{controller="configmap-mirror",name="configmap-mirror"}',
        'workqueue_work_duration_seconds_count{controller="configmap-mirror",name="configmap-mirror"}',
        'rest_client_requests_total{code="200",host=',
        'controller_runtime_active_workers{controller="configmap-mirror"}',
        'leader_election_master_status{name="configmap-mirror"}',
        'rest_client_requests_by_resource_total{code="200",resource="configmaps",verb="list"}',
    ):
        lines = [ln for ln in text.splitlines() if ln.startswith(name)]
        assert lines, f"{name} missing from /metrics"
        if "depth" not in name and "active_workers" not in name:
            assert float(lines[0].rsplit(" ", 1)[1]) > 0, lines[0]


async def _eq(aw: Any, want: Any) -> bool:
    return bool(await aw == want)


# -- leader election across processes -----------------------------------------------------------------


@pytest.fixture
def two_managers(
    kube_cluster: Path, namespace: str
) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], int]]]:
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    for ident in ("alpha", "beta"):
        port = free_port()
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "examples" / "configmap_mirror.py"),
                "--kubeconfig", str(kube_cluster),
                "--namespace", namespace,
                "--leader-elect",
                "--leader-election-namespace", namespace,
                "--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "1",
                "--identity", ident,
                "--health-port", str(port),
                "--metrics-port", "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )  # fmt: skip
        procs[ident] = (proc, port)
    yield procs
    for proc, _ in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


async def _ready(port: int) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as http:
            return (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
    except httpx.HTTPError:
        return False


def _lease_holder(c: rclient.Client, namespace: str) -> Callable[[], Awaitable[str | None]]:
    async def holder() -> str | None:
        try:
            lease = await c.get(resources.LEASE, "configmap-mirror", namespace)
        except rclient.ApiError:
            return None
        return lease["spec"].get("holderIdentity") or None

    return holder


async def _roles(c: rclient.Client, namespace: str) -> tuple[Callable[[], Awaitable[str | None]], str, str]:
    """The Lease's holder (a probe), and once one of the two managers leads: the leader, the other."""
    holder = _lease_holder(c, namespace)
    leader = await wait.until(holder, timeout=60, what="a leader")
    return holder, leader, "beta" if leader == "alpha" else "alpha"


async def test_two_managers_one_leader_and_failover_after_sigkill(
    admin_client: rclient.Client, namespace: str, two_managers: dict[str, tuple[subprocess.Popen[bytes], int]]
) -> None:
    holder, leader, other = await _roles(admin_client, namespace)
    await wait.until(lambda: _ready(two_managers[leader][1]), timeout=30, what="leader ready")
    # exactly one leads: the standby's /readyz stays 503 while the leader holds the Lease
    assert not await _ready(two_managers[other][1])
    await admin_client.create(resources.CONFIG_MAP, _parent("work", {"a": "1"}), namespace)
    await wait.until(
        lambda: _eq(_mirror_data(admin_client, namespace, "work"), {"a": "1"}), what="leader works"
    )

    two_managers[leader][0].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()

    async def taken_over() -> bool:
        return await holder() == other and await _ready(two_managers[other][1])

    # wait longer than the contract, then assert the contract: lease duration (6 s) + 5 s
    await wait.until(taken_over, timeout=30, interval=0.1, what=f"{other} takes over")
    took = time.monotonic() - killed_at
    assert took <= 6 + 5, f"{other} took over {took:.1f}s after the SIGKILL (contract: lease + 5 s)"
    await admin_client.patch(resources.CONFIG_MAP, "work", {"data": {"a": "2"}}, namespace=namespace)
    await wait.until(
        lambda: _eq(_mirror_data(admin_client, namespace, "work"), {"a": "2"}), what="new leader works"
    )


async def test_sigterm_releases_the_lease_and_exits_zero(
    admin_client: rclient.Client, namespace: str, two_managers: dict[str, tuple[subprocess.Popen[bytes], int]]
) -> None:
    holder, leader, other = await _roles(admin_client, namespace)
    proc = two_managers[leader][0]
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.wait, 30)
    assert code == 0
    # released, so the standby takes over at its next retry, well before the lease would expire
    started = time.monotonic()
    await wait.until(lambda: _eq(holder(), other), timeout=6, interval=0.1, what="standby takes over")
    assert time.monotonic() - started < 6


class _Blocking:
    """A reconciler whose reconcile of ``slow`` blocks until released, then reads the Lease: what a
    write at that moment would race with."""

    def __init__(self, c: rclient.Client, namespace: str) -> None:
        self.c, self.namespace = c, namespace
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.holder_at_end: str | None = None

    async def reconcile(self, req: Request) -> Result:
        if req.name != "slow":
            return Result()
        self.entered.set()
        await self.release.wait()
        lease = await self.c.get(resources.LEASE, "drain-before-release", self.namespace)
        self.holder_at_end = str(lease["spec"].get("holderIdentity") or "")
        return Result()


async def test_a_stopping_leader_keeps_its_lease_until_in_flight_reconciles_end(
    kube_cluster: Path, admin_client: rclient.Client, namespace: str
) -> None:
    """controller-runtime's order on a graceful stop: controllers drain while the Lease is held, then
    it is released; released first, a standby could take over and write while the last reconciles
    still do (regression: the elector cancelled the drain and released at once)."""
    async with rclient.Client.from_kubeconfig(kube_cluster) as c:
        options = operator.options(namespace, lease="drain-before-release", **operator.FAST_LEASE)
        mgr = rmanager.Manager(c, options)
        reconciler = _Blocking(admin_client, namespace)
        mgr.add(mgr.builder("blocking").for_(resources.CONFIG_MAP).build(reconciler))
        task = asyncio.create_task(mgr.run())
        try:
            await admin_client.create(
                resources.CONFIG_MAP, {"metadata": {"name": "slow"}, "data": {}}, namespace
            )
            await asyncio.wait_for(reconciler.entered.wait(), 30)
            mgr.stop()

            async def renewed_while_draining() -> bool:  # still held, and renewed, after the stop
                lease = await admin_client.get(resources.LEASE, "drain-before-release", namespace)
                return lease["spec"].get("holderIdentity") == mgr.options.identity and (
                    lease["spec"].get("renewTime") != first["spec"].get("renewTime")
                )

            first = await admin_client.get(resources.LEASE, "drain-before-release", namespace)
            assert first["spec"].get("holderIdentity") == mgr.options.identity, first["spec"]
            await wait.until(renewed_while_draining, timeout=10, what="the Lease renewed while draining")
            assert not task.done()
            reconciler.release.set()
            await asyncio.wait_for(task, 30)
        finally:
            reconciler.release.set()
            mgr.stop()
            await asyncio.wait_for(task, 30)
        assert reconciler.holder_at_end == mgr.options.identity, (
            f"the in-flight reconcile ended after the Lease went to {reconciler.holder_at_end!r}"
        )
        lease = await admin_client.get(resources.LEASE, "drain-before-release", namespace)
        assert not lease["spec"].get("holderIdentity"), f"not released at the end: {lease['spec']}"
