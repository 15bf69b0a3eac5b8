"""Autoscaling end to end: simulated load -> metrics-server -> the HPA scales the predictor
Deployment, and the operator follows in status without ever writing the Deployment.

The local cluster runs metrics-server, and kwok makes up each pod's CPU and memory use from the
simulated usage table (``devcluster.usage``): a load of "pods of this InferenceService use X % of
their CPU request" also covers the pods the HPA adds. kube-controller-manager runs the HPA
controller with a 5 s sync period and a 15 s downscale stabilization window (``devcluster.cluster``);
metrics-server keeps one sample per pod every 15 s.

One operator (module-scoped, in this process, admin credentials, no leader election) watches this
module's own namespace; its client counts every request it makes. The loop that samples replica
counts is a measurement (what the HPA and the operator did, and when), never synchronisation: every
wait is on a condition with a timeout. Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlops_platform.controllers.inferenceservice import labels, servers
from mlops_platform.devcluster import usage
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import isvc, plugin, probes, requests, wait, webhook
from mlops_platform.testing import operator as operator_process

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request goes through the conversion webhook
FRAMEWORK = "torchserve"
TARGET = servers.default_table()[FRAMEWORK].target_cpu_utilization  # % of the CPU request
MIN, MAX = 2, 5  # as config/samples/torchserve-hpa.yaml
CPU_REQUEST = "500m"
# the load: 1.5 x the target (120 % of the request at 80 %), so every HPA step is a clear scale-up
# (2 -> 3 -> 5 when the new pods' samples arrive); idle is the table's default, 1m (0.2 %)
LOAD = 1.5 * TARGET / 100
# acceptance bounds (the waits' own timeouts are longer, so a miss reports the measured figure):
# scale-up takes ~2 HPA steps, each a sync (5 s) plus up to two metric windows (2 x 15 s) for the
# new pods' samples; scale-down a window to see idle, the 15 s stabilization, then one step
SCALE_UP_WITHIN = 120.0
SCALE_DOWN_WITHIN = 90.0
TIMEOUT = 300.0
SAMPLE_EVERY = 0.5


@dataclasses.dataclass
class Env:
    namespace: str
    manager: rmanager.Manager
    #: the operator's own client (its request counters)
    client: rclient.Client


@pytest.fixture(scope="module")
async def env(kube_cluster: Path, admin_client: rclient.Client) -> AsyncIterator[Env]:
    """The operator watching one fresh namespace (the metrics API must be there: fail, never skip)."""
    assert await usage.metrics_api_registered(admin_client), (
        "the cluster under test has no metrics API (metrics-server): re-create it with `dev up`"
    )
    await usage.wait_metrics_api(admin_client, timeout=60)
    await webhook.install_crd(admin_client)
    async with (
        plugin.temporary_namespace(admin_client, "autoscaling") as ns,
        rclient.Client.from_kubeconfig(str(kube_cluster)) as c,
        operator_process.running(c, namespace=ns) as mgr,
    ):
        yield Env(ns, mgr, c)


def _deployment_writes(c: rclient.Client) -> dict[tuple[str, str, int], int]:
    """The operator's writes to Deployments (the object and its subresources, scale included)."""
    return {
        k: n
        for k, n in c.requests.items()
        if k[0] in requests.WRITE_VERBS and k[1].split("/")[0] == resources.DEPLOYMENT.group_resource
    }


def _entry(dep: dict[str, Any], manager: str) -> dict[str, Any]:
    """The operator's managedFields entry on the Deployment (its server-side apply)."""
    entries = [m for m in dep["metadata"].get("managedFields") or () if m.get("manager") == manager]
    assert len(entries) == 1, [m.get("manager") for m in dep["metadata"].get("managedFields") or ()]
    return entries[0]


def _owns_replicas(entry: dict[str, Any]) -> bool:
    return "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})


@dataclasses.dataclass
class Sample:
    at: float
    deployment: int  # spec.replicas (what the HPA asked)
    hpa_desired: int
    isvc_replicas: int  # status.replicas (what the operator reports)
    utilization: int | None  # the HPA's current average CPU utilization, % of the request


class Sampler:
    """Samples the Deployment, the HPA and the InferenceService's status every SAMPLE_EVERY seconds."""

    def __init__(self, c: rclient.Client, ns: str, name: str) -> None:
        self.c, self.ns, self.name = c, ns, name
        self.samples: list[Sample] = []

    async def sample(self) -> None:
        dep = await self.c.get(resources.DEPLOYMENT, f"{self.name}-predictor", self.ns)
        hpa = await self.c.get(resources.HPA, f"{self.name}-predictor", self.ns)
        obj = await self.c.get(ISVC, self.name, self.ns)
        current = [m for m in (hpa.get("status") or {}).get("currentMetrics") or () if m.get("resource")]
        util = current[0]["resource"]["current"].get("averageUtilization") if current else None
        self.samples.append(
            Sample(
                time.monotonic(),
                int(dep["spec"].get("replicas", 0)),
                int((hpa.get("status") or {}).get("desiredReplicas") or 0),
                int((obj.get("status") or {}).get("replicas") or 0),
                util,
            )
        )

    async def run(self) -> None:
        while True:
            with contextlib.suppress(rclient.ApiError, rclient.TransportError):
                await self.sample()
            await asyncio.sleep(SAMPLE_EVERY)  # a measurement's pace, not a synchronisation

    def steps(self, since: float) -> list[tuple[float, int]]:
        """(seconds after ``since``, Deployment replicas) at each change of the Deployment's count."""
        out: list[tuple[float, int]] = []
        for s in self.samples:
            if s.at >= since and (not out or out[-1][1] != s.deployment):
                out.append((round(s.at - since, 1), s.deployment))
        return out


@contextlib.asynccontextmanager
async def _sampling(sampler: Sampler) -> AsyncIterator[Sampler]:
    task = asyncio.create_task(sampler.run())
    try:
        yield sampler
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _replicas(c: rclient.Client, ns: str, name: str, n: int) -> dict[str, Any] | None:
    """The InferenceService once its Deployment asks for ``n`` replicas and its status reports ``n``
    ready (the operator followed the HPA), else None."""
    dep = await c.get(resources.DEPLOYMENT, f"{name}-predictor", ns)
    obj = await c.get(ISVC, name, ns)
    st = obj.get("status") or {}
    follows = st.get("replicas") == n and st.get("readyReplicas") == n
    return obj if dep["spec"].get("replicas") == n and follows else None


async def test_load_scales_to_max_and_idle_back_to_min_without_the_operator_writing_the_deployment(
    admin_client: rclient.Client, env: Env, kubectl: plugin.Kubectl
) -> None:
    c, ns, name = admin_client, env.namespace, "auto"
    manifest = isvc.manifest(
        name,
        modelUri="s3://models/m/1",
        framework=FRAMEWORK,
        minReplicas=MIN,
        maxReplicas=MAX,
        resources={"cpuRequest": CPU_REQUEST},
    )
    await c.create(ISVC, manifest, ns)
    await wait.for_condition(c, ISVC, ns, name, "Ready", "True", timeout=TIMEOUT)
    # the HPA computes utilization from metrics-server: healthy, not FailedGetResourceMetric
    obj = await wait.for_condition(c, ISVC, ns, name, "AutoscalerReady", "True", "ScalingActive", timeout=120)
    assert obj["status"]["replicas"] == MIN
    hpa = await c.get(resources.HPA, f"{name}-predictor", ns)
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == TARGET

    # kubectl top: the resource metrics API serves every pod of the service
    async def top() -> str | None:
        rc, out, _ = await kubectl("top", "pods", "-n", ns, "-l", f"{labels.INFERENCESERVICE}={name}")
        return out if rc == 0 and out.count(f"{name}-predictor-") == MIN else None

    out = await wait.until(top, timeout=60, what="kubectl top pods lists the service's pods")
    print(f"\n$ kubectl top pods -n {ns}\n{out}")

    dep = await c.get(resources.DEPLOYMENT, f"{name}-predictor", ns)
    operator_entry = _entry(dep, labels.MANAGER)
    writes_before = _deployment_writes(env.client)
    load = usage.for_inferenceservice(ns, name, cpu=LOAD)
    sampler = Sampler(c, ns, name)
    async with _sampling(sampler), usage.loaded(c, load):
        # load up: the HPA scales towards maxReplicas, status.replicas follows
        t_up = time.monotonic()
        await wait.until(
            lambda: _replicas(c, ns, name, MAX), timeout=TIMEOUT, what=f"{MAX} replicas under load"
        )
        up = time.monotonic() - t_up
        await sampler.sample()  # the state the wait saw, whatever the sampler's phase
        up_steps = sampler.steps(t_up)
        peak = max((s.utilization or 0) for s in sampler.samples)
        writes_up = _deployment_writes(env.client)
        dep_up = await c.get(resources.DEPLOYMENT, f"{name}-predictor", ns)

    # load down (the table's idle default): back to minReplicas after the stabilization window
    t_down = time.monotonic()
    async with _sampling(sampler):
        await wait.until(lambda: _replicas(c, ns, name, MIN), timeout=TIMEOUT, what=f"{MIN} replicas idle")
    down = time.monotonic() - t_down
    await sampler.sample()
    down_steps = sampler.steps(t_down)
    writes_down = _deployment_writes(env.client)
    dep_down = await c.get(resources.DEPLOYMENT, f"{name}-predictor", ns)
    print(
        f"\nscale-up {MIN}->{MAX} in {up:.1f}s (Deployment replicas at s after the load: {up_steps}; "
        f"peak HPA utilization {peak}% of the request, target {TARGET}%)"
        f"\nscale-down {MAX}->{MIN} in {down:.1f}s ({down_steps})"
    )

    # the HPA moved the count up, never down, under load, and only down once idle
    counts = [n for _, n in up_steps]
    assert counts == sorted(counts) and counts[-1] == MAX and len(counts) >= 2, up_steps
    assert peak >= TARGET * 1.4, peak  # ~120 % measured: the simulated load reached the HPA
    assert [n for _, n in down_steps][-1] == MIN, down_steps
    assert up < SCALE_UP_WITHIN, f"scale-up took {up:.1f}s ({up_steps})"
    assert down < SCALE_DOWN_WITHIN, f"scale-down took {down:.1f}s ({down_steps})"
    # the operator never fought the HPA: not one write to the Deployment (or its scale) in either
    # direction, although it reconciled every step (status.replicas followed, checked above) ...
    assert writes_up == writes_before, (writes_before, writes_up)
    assert writes_down == writes_before, (writes_before, writes_down)
    # ... and the API server agrees: the operator's apply is untouched and spec.replicas is now the
    # HPA's (the scale subresource's manager), not co-owned by a later apply of the operator
    for live in (dep_up, dep_down):
        assert _entry(live, labels.MANAGER)["time"] == operator_entry["time"]
        assert not _owns_replicas(_entry(live, labels.MANAGER))
        owners = [m for m in live["metadata"]["managedFields"] if _owns_replicas(m)]
        assert [m.get("subresource") for m in owners] == ["scale"], owners
    final = await c.get(ISVC, name, ns)
    assert probes.condition(final, "AutoscalerReady")["status"] == "True"
    assert final["status"]["replicasSummary"] == f"{MIN}/{MIN}"
