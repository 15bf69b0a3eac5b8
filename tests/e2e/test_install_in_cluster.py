"""The operator installed in the cluster as users install it, running on the real node from the image
built here: Helm (install, upgrade to a new image tag and changed values under conversion load,
uninstall), ``mlops-platform manifests | kubectl apply`` and the kustomize path.

Each install goes into :data:`incluster.NAMESPACE` with the chart's placement values (the real node's
taint tolerated, its label selected); the CRD names the webhook Service there (what
``docs/install.md`` says for a namespace other than ``mlops-system``), so the API server converts
through the Service, at its ClusterIP, to the pods' webhooks with their self-managed certificate.
The session's own webhook is paused meanwhile and the CRD restored after. The API server's audit
log keeps every request of the install's ServiceAccount: not one may be refused (403).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlops_platform.api import crd, v1alpha1
from mlops_platform.deploy import builders
from mlops_platform.runtime.transport import apiextensions
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import conversionload, helmchart, incluster, isvc, plugin, wait, webhook

NS = incluster.NAMESPACE
RELEASE = "mlops-platform"
WORKERS = 3
V1 = crd.RESOURCE
BETA = conversionload.BETA


def _values(image: str, **more: Any) -> dict[str, Any]:
    return {"namespace": NS, "image": image, **incluster.PLACEMENT, **more}


@pytest.fixture(scope="module")
async def installable(
    local_cluster_name: str,
    admin_client: rclient.Client,
    kube_cluster: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[dict[str, str]]:
    """The operator image on the real node (both tags), the session's webhook paused, the CRD naming
    the webhook Service in :data:`NS`; the environment helm runs in (its own home, this cluster)."""
    await asyncio.to_thread(incluster.import_images, local_cluster_name)
    assert incluster.build_tools_in_image() == []  # no compiler, no pip
    home = tmp_path_factory.mktemp("helm")
    env = {
        **os.environ,
        "KUBECONFIG": str(kube_cluster),
        **{f"HELM_{d}_HOME": str(home / d.lower()) for d in ("CACHE", "CONFIG", "DATA")},
    }
    async with webhook.paused(admin_client):
        await apiextensions.install(
            admin_client, [builders.crd_object(NS)], field_manager=v1alpha1.FIELD_MANAGER
        )
        yield env


async def _helm(env: dict[str, str], *args: str, values: dict[str, Any] | None = None) -> float:
    """``helm ARGS`` (off the event loop: the load goes on meanwhile); the seconds it took."""
    started = time.monotonic()
    await asyncio.to_thread(helmchart.run, *args, values=values, env=env)
    return time.monotonic() - started


async def _converts_all_versions(c: rclient.Client, namespace: str, name: str) -> None:
    alpha = await c.get(isvc.RESOURCE, name, namespace)
    beta = await c.get(BETA, name, namespace)
    v1 = await c.get(V1, name, namespace)
    assert (
        alpha["spec"]["modelUri"]
        == beta["spec"]["predictor"]["model"]["uri"]
        == v1["spec"]["predictor"]["model"]["uri"]
    )


@contextlib.asynccontextmanager
async def _load(kube_cluster: Path, c: rclient.Client) -> AsyncIterator[conversionload.ConversionLoad]:
    """Conversions through the webhook Service from WORKERS workers for the block (and a few cycles
    after it), in a namespace of their own."""
    async with (
        plugin.temporary_namespace(c, "incluster-load") as ns,
        rclient.Client.from_kubeconfig(kube_cluster) as lc,
    ):
        load = conversionload.ConversionLoad(lc, ns)
        workers = [asyncio.create_task(load.worker(k)) for k in range(WORKERS)]
        try:
            yield load
        finally:
            load.stopping = True
            await asyncio.gather(*workers)


async def test_helm_installs_upgrades_and_uninstalls_the_operator_on_the_real_node(
    installable: dict[str, str],
    admin_client: rclient.Client,
    kube_cluster: Path,
    local_cluster_name: str,
    namespace: str,
) -> None:
    c, chart = admin_client, str(incluster.chart_dir())
    installed = await _helm(
        installable, "install", RELEASE, chart, "--namespace", "default", "--skip-crds",
        "--wait", "--timeout", "180s",
        values=_values(incluster.IMAGE),
    )  # fmt: skip
    try:
        started = time.monotonic()
        await incluster.until_serving(c, incluster.IMAGE)
        ready = installed + time.monotonic() - started
        first_leader = await incluster.leader(c)

        await c.create(
            isvc.RESOURCE,
            isvc.manifest("in-cluster", modelUri="gs://m/iris/1", framework="triton"),
            namespace,
        )
        await incluster.until_reconciled(c, namespace, "in-cluster")
        await _converts_all_versions(c, namespace, "in-cluster")

        memory = {"resources": {"limits": {"memory": "1Gi"}}}
        async with _load(kube_cluster, c) as load:
            await wait.until(
                lambda: load.cycles >= 10, timeout=60, what="10 conversion cycles before the upgrade"
            )
            before = load.requests
            upgraded = await _helm(
                installable, "upgrade", RELEASE, chart, "--namespace", "default",
                "--wait", "--timeout", "300s",
                values=_values(incluster.UPGRADE_IMAGE, **memory),
            )  # fmt: skip
            started = time.monotonic()
            await incluster.until_serving(c, incluster.UPGRADE_IMAGE)
            upgraded += time.monotonic() - started
            during = load.requests - before
        print(
            f"helm install -> 2 replicas Ready, leader, converting: {ready:.1f}s; helm upgrade (new tag and"
            f" memory limit) -> rolled: {upgraded:.1f}s, {during} conversion requests meanwhile,"
            f" {len(load.failures)} failed, {load.conflicts} update conflicts re-sent"
        )
        assert load.failures == [], load.failures
        assert during > 0
        pods = await incluster.manager_pods(c)
        assert {p["spec"]["containers"][0]["resources"]["limits"]["memory"] for p in pods} == {"1Gi"}
        assert await incluster.leader(c) != first_leader  # the old pods are gone: a new leader

        # the upgraded operator reconciles what was there and what changes now
        await incluster.until_reconciled(c, namespace, "in-cluster")
        await c.patch(
            V1,
            "in-cluster",
            {"spec": {"predictor": {"model": {"uri": "gs://m/iris/2"}}}},
            namespace=namespace,
        )
        obj = await incluster.until_reconciled(c, namespace, "in-cluster")
        assert obj["spec"]["predictor"]["model"]["uri"] == "gs://m/iris/2"

        entries = incluster.audit_entries(local_cluster_name)
        assert entries, "no audit entry of the operator's ServiceAccount: is the audit policy current?"
        assert incluster.forbidden(entries) == []
    finally:
        await admin_client.delete(isvc.RESOURCE, "in-cluster", namespace)
        await _helm(
            installable, "uninstall", RELEASE, "--namespace", "default", "--wait", "--timeout", "120s"
        )
    await incluster.until_uninstalled(c)
