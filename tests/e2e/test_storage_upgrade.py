"""The upgrade of a cluster that ran the previous release: its CRD served and stored v1alpha1 only.

Thirty varied objects are written under that CRD; the current CRD (v1alpha1, v1beta1, v1 as the
storage version, converted by the session's webhook) is installed over it; every object reads in v1
as :func:`conversion.convert` says, the operator reconciles them, and ``migrate-storage`` re-encodes
what is still stored at v1alpha1 and trims ``status.storedVersions``, proven by reading etcd. The
shared CRD is the current one afterwards, its webhook's CA bundle injected (``webhook.paused``).

The operator watches one of two namespaces: its own status writes re-encode what it reconciles at
the storage version, so only the objects of the other (nothing writes them) are left to the migration.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlops_platform.api import conversion, crd, v1alpha1
from mlops_platform.runtime import objects
from mlops_platform.runtime.control import storagemigration as sm
from mlops_platform.runtime.control import storagemigration_report as sm_report
from mlops_platform.runtime.transport import apiextensions, resources
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import conversion as tconv
from mlops_platform.testing import etcd, isvc, plugin, probes, wait, webhook
from mlops_platform.testing import operator as operator_process

JSON = dict[str, Any]
ALPHA = isvc.RESOURCE
V1 = crd.RESOURCE
V1_API = f"{crd.RESOURCE.group}/v1"
ALPHA_API = v1alpha1.API_VERSION
TIMEOUT = 120
#: objects the operator reconciles, and objects in a namespace it does not watch
SERVED, IDLE = 20, 10
SUMMARY = re.compile(
    r"storedVersions \[v1alpha1, v1\] -> \[v1\] by rewrite in [0-9.]+s: (?P<seen>\d+) objects: "
    r"(?P<rewritten>\d+) rewritten, (?P<unchanged>\d+) already current, (?P<conflicts>\d+) conflicts, "
    r"(?P<gone>\d+) gone"
)
#: the previous release's CRD: v1alpha1 only, stored as v1alpha1, no conversion
PREVIOUS = crd.crd_manifest(
    versions=(
        crd.Version(
            v1alpha1.VERSION,
            v1alpha1.InferenceService,
            storage=True,
            spec_replicas_path=".spec.minReplicas",
            columns=tuple(crd.ALPHA_COLUMNS),
        ),
    )
)


def alpha_spec(i: int) -> JSON:
    """Five shapes: plain; a canary by version token; GPUs and resources; a canary by full URI with
    integer quantities; extensions (graduated keys and an unknown one)."""
    uri = f"gs://models/m{i}/1"
    shape = i % 5
    if shape == 0:
        return {"modelUri": uri, "framework": "triton"}
    if shape == 1:
        return {
            "modelUri": uri,
            "framework": "torchserve",
            "minReplicas": 2,
            "maxReplicas": 4,
            "traffic": {"canaryVersion": "2", "canaryPercent": 10},
        }
    if shape == 2:
        return {
            "modelUri": f"s3://bucket/m{i}/7",
            "framework": "triton",
            "gpuPerReplica": 1,
            "resources": {
                "cpuRequest": "500m",
                "cpuLimit": "2",
                "memoryRequest": "1Gi",
                "memoryLimit": "2Gi",
            },
        }
    if shape == 3:
        return {
            "modelUri": uri,
            "framework": "seldon",
            "port": 9000,
            "resources": {"cpuLimit": 2, "memoryRequest": "512Mi"},
            "traffic": {"canaryVersion": f"pvc://claim/m{i}/9", "canaryPercent": 0},
        }
    return {
        "modelUri": uri,
        "framework": "torchserve",
        "maxReplicas": 3,
        "extensions": {
            "monitoring": {"alerts": {"errorRatio": 0.02}},
            "networkPolicy": {"enabled": True},
            "team": "search",
        },
    }


async def _stored(cluster_name: str, namespaces: tuple[str, str]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for ns in namespaces:
        found = await asyncio.to_thread(etcd.stored_api_versions, cluster_name, V1, ns)
        out.update({(ns, name): version for name, version in found.items()})
    return out


async def _crd(c: rclient.Client) -> JSON:
    return await c.get(resources.CRD, crd.CRD_NAME)


async def _v1_objects(c: rclient.Client, namespaces: tuple[str, str]) -> dict[tuple[str, str], JSON]:
    out: dict[tuple[str, str], JSON] = {}
    for ns in namespaces:
        for obj in (await c.list(V1, ns))["items"]:
            out[(ns, objects.name(obj))] = obj
    return out


async def _deployments(c: rclient.Client, namespace: str, names: list[str]) -> dict[str, int]:
    """``name -> generation`` of each object's predictor Deployment, once it exists."""
    out: dict[str, int] = {}
    for name in names:
        dep = await wait.until(
            lambda name=name: probes.get_or_none(c, resources.DEPLOYMENT, namespace, f"{name}-predictor"),
            timeout=TIMEOUT,
            what=f"Deployment {name}-predictor",
        )
        out[name] = int(dep["metadata"]["generation"])
    return out


async def _migrate_cli(kubeconfig: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mlops_platform.cli", "migrate-storage",
        "--kubeconfig", str(kubeconfig), "--method", "rewrite", "--timeout", "120",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ),
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
async def namespaces(admin_client: rclient.Client) -> AsyncIterator[tuple[str, str]]:
    async with (
        plugin.temporary_namespace(admin_client, "upgrade-served") as served,
        plugin.temporary_namespace(admin_client, "upgrade-idle") as idle,
    ):
        yield served, idle


async def test_upgrade_from_the_v1alpha1_only_release_then_migrate_storage(
    admin_client: rclient.Client,
    namespaces: tuple[str, str],
    kube_cluster: Path,
    local_cluster_name: str,
) -> None:
    c = admin_client
    served_ns, idle_ns = namespaces
    names = {served_ns: [f"s-{i:02d}" for i in range(SERVED)], idle_ns: [f"i-{i:02d}" for i in range(IDLE)]}
    created: dict[tuple[str, str], JSON] = {}

    # -- the previous release: its CRD, objects written in v1alpha1 (the session's webhook stopped,
    #    so it does not patch a CRD without conversion; on exit: the current CRD, its bundle injected)
    async with webhook.paused(c):
        await apiextensions.uninstall(c, [crd.CRD_NAME], timeout=TIMEOUT)
        await apiextensions.install(c, [PREVIOUS], field_manager=v1alpha1.FIELD_MANAGER, timeout=TIMEOUT)
        old = await _crd(c)
        assert sm_report.stored_versions(old) == ["v1alpha1"]
        assert (old["spec"].get("conversion") or {}).get("strategy", "None") == "None"
        for ns, listed in names.items():
            for n, name in enumerate(listed):
                body = isvc.manifest(name, **alpha_spec(n))
                created[(ns, name)] = await c.create(ALPHA, body, ns)
        stored = await _stored(local_cluster_name, namespaces)
        assert stored == dict.fromkeys(created, ALPHA_API)

    # -- the current CRD: every object reads in v1 as the conversion says, nothing was rewritten
    live = await _crd(c)
    assert sm_report.storage_version(live) == "v1"
    assert sm_report.stored_versions(live) == ["v1alpha1", "v1"]
    assert live["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == webhook.url()
    assert await webhook.ca_bundle(c) == await webhook.stored_bundle(c)
    expected = {key: tconv.defaulted(conversion.convert(obj, V1_API))["spec"] for key, obj in created.items()}
    hub = await _v1_objects(c, namespaces)
    assert {key: obj["spec"] for key, obj in hub.items()} == expected
    assert {obj["apiVersion"] for obj in hub.values()} == {V1_API}
    for key, obj in created.items():  # and in v1alpha1 exactly as written
        again = await c.get(ALPHA, key[1], key[0])
        assert again["spec"] == obj["spec"]
        assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    assert await _stored(local_cluster_name, namespaces) == dict.fromkeys(created, ALPHA_API)

    # -- the operator reconciles the objects of its namespace
    async with (
        rclient.Client.from_kubeconfig(kube_cluster) as oc,
        operator_process.running(oc, namespace=served_ns),
    ):
        for name in names[served_ns]:
            await wait.for_condition(c, V1, served_ns, name, "Reconciled", "True", timeout=TIMEOUT)
        deployments = await _deployments(c, served_ns, names[served_ns])
        before = await _stored(local_cluster_name, namespaces)
        # its status writes re-encoded what it reconciled; the idle namespace is as written
        assert {k: v for k, v in before.items() if k[0] == idle_ns} == dict.fromkeys(
            [(idle_ns, n) for n in names[idle_ns]], ALPHA_API
        )
        left = sorted(k for k, v in before.items() if v == ALPHA_API)
        versions_before = {
            key: obj["metadata"]["resourceVersion"] for key, obj in (await _v1_objects(c, namespaces)).items()
        }

        # -- the migration, as an operator of the cluster runs it
        rc, out, err = await _migrate_cli(kube_cluster)
        assert rc == 0, err
        total = SERVED + IDLE
        summary = SUMMARY.search(out)
        assert summary is not None, (out, err)
        counts = {k: int(v) for k, v in summary.groupdict().items()}
        # the operator may write a status meanwhile (a conflict, or re-encoded before the PUT)
        assert counts["seen"] == total and counts["gone"] == 0, out
        assert counts["rewritten"] + counts["unchanged"] + counts["conflicts"] == total, out
        assert counts["rewritten"] + counts["conflicts"] >= len(left), out
        live = await _crd(c)
        assert sm_report.stored_versions(live) == ["v1"]
        assert await _stored(local_cluster_name, namespaces) == dict.fromkeys(created, V1_API)
        hub = await _v1_objects(c, namespaces)
        assert {key: obj["spec"] for key, obj in hub.items()} == expected
        written = {k for k, obj in hub.items() if obj["metadata"]["resourceVersion"] != versions_before[k]}
        assert written >= set(left)
        # no rollout: the Deployments of the reconciled objects were not changed
        for name in names[served_ns]:
            await wait.for_condition(c, V1, served_ns, name, "Reconciled", "True", timeout=TIMEOUT)
        assert await _deployments(c, served_ns, names[served_ns]) == deployments

        # -- a second run has nothing to do and writes nothing
        async with rclient.Client.from_kubeconfig(kube_cluster) as fresh:
            rerun = await sm.migrate(fresh, crd.CRD_NAME, method="rewrite", timeout=60)
            writes = sum(
                n for (verb, _, _), n in fresh.requests.items() if verb in ("create", "update", "patch")
            )
        assert rerun.method == "none" and rerun.stored_versions_after == ["v1"]
        assert writes == 0
        # the idle objects, which nothing else writes, are as the migration left them
        idle_after = {
            (idle_ns, objects.name(o)): o["metadata"]["resourceVersion"]
            for o in (await c.list(V1, idle_ns))["items"]
        }
        assert idle_after == {k: o["metadata"]["resourceVersion"] for k, o in hub.items() if k[0] == idle_ns}
    live = await _crd(c)
    assert sm_report.stored_versions(live) == ["v1"]
    assert await webhook.ca_bundle(c) == await webhook.stored_bundle(c)
