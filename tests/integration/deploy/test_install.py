"""The install set on a real kube-apiserver: server-side dry runs, Pod Security ``restricted`` enforced.

Each test creates its own operator namespace (unique name, restricted labels) for real and deletes
it afterwards; everything else is a server-side dry run, so cluster-wide objects (CRD, ClusterRole)
are never changed and parallel runs do not clash.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlops_platform.deploy import builders as deploy_builders
from mlops_platform.deploy import defaults as deploy_defaults
from mlops_platform.deploy import manifests
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport.client import ApiError, Client
from mlops_platform.testing import helmchart, plugin
from mlops_platform.testing.plugin import TEST_NAMESPACE_LABEL

ROOT = Path(__file__).resolve().parents[3]
Obj = dict[str, Any]
Kubectl = plugin.Kubectl


@pytest.fixture
async def operator_namespace(admin_client: Client) -> AsyncIterator[str]:
    """A real operator namespace with the generated Pod Security labels, unique per test."""
    name = f"mlops-op-{uuid.uuid4().hex[:8]}"
    ns = deploy_builders.namespace_object(name)
    ns["metadata"]["labels"][TEST_NAMESPACE_LABEL] = "true"
    await admin_client.create(resources.NAMESPACE, ns)
    yield name
    try:
        await admin_client.delete(resources.NAMESPACE, name, propagation_policy="Background")
    except ApiError as e:
        if not e.not_found:
            raise


def key(o: Obj) -> tuple[str, str, str]:
    return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])


def by_key(objs: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return {key(o): o for o in objs if o}


def _own_crd_group(text: str) -> str:
    """The install set with the InferenceService CRD in a group of its own: the test session's CRD
    calls its webhook by URL, and an apply of the install set's Service client config over it would
    hold both (invalid); a same-shaped CRD of another group dry-runs exactly the install set's CRD."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        if d["kind"] == "CustomResourceDefinition" and d["spec"]["group"] == "mlops.platform":
            d["spec"]["group"] = DRY_RUN_GROUP
            d["metadata"]["name"] = f"{d['spec']['names']['plural']}.{DRY_RUN_GROUP}"
    return yaml.safe_dump_all(docs)


DRY_RUN_GROUP = "dry-run.mlops.platform"


async def dry_run_apply(kubectl: Kubectl, text: str, *extra: str) -> list[str]:
    text = _own_crd_group(text)
    rc, out, err = await kubectl("apply", "--dry-run=server", *extra, "-f", "-", stdin=text)
    assert rc == 0, err
    assert "PodSecurity" not in err, err  # no "would violate PodSecurity" warning for the Deployment
    return out.splitlines()


@pytest.mark.parametrize("server_side", [False, True])
async def test_the_install_set_passes_a_server_side_dry_run(
    kubectl: Kubectl, operator_namespace: str, server_side: bool
) -> None:
    text = manifests.render(namespace=operator_namespace)
    extra = ("--server-side", "--field-manager=mlops-install-test") if server_side else ()
    lines = await dry_run_apply(kubectl, text, *extra)
    expected = manifests.install_objects(namespace=operator_namespace)
    assert len(lines) == len(expected)
    assert all(line.endswith("(server dry run)") for line in lines), lines


async def test_the_namespaced_install_set_passes_a_server_side_dry_run(
    kubectl: Kubectl, operator_namespace: str, namespace: str
) -> None:
    text = manifests.render(namespace=operator_namespace, watch_namespaces=[namespace])
    lines = await dry_run_apply(kubectl, text)
    assert any(line.startswith("role.rbac.authorization.k8s.io/mlops-platform-manager") for line in lines)
    # cluster-wide only the read-only CRD reader (optional kinds), no manager ClusterRole
    cluster = sorted(line.split()[0] for line in lines if line.startswith("clusterrole"))
    assert cluster == [
        "clusterrole.rbac.authorization.k8s.io/mlops-platform-cluster-reader",
        "clusterrolebinding.rbac.authorization.k8s.io/mlops-platform-cluster-reader",
    ]


def manager_pod(namespace: str, deployment: str = "mlops-platform") -> Obj:
    """A Pod made from a Deployment's pod template (the manager's by default), as the ReplicaSet
    controller would make it."""
    [deploy] = [
        o
        for o in manifests.install_objects(namespace=namespace)
        if o["kind"] == "Deployment" and o["metadata"]["name"] == deployment
    ]
    template = copy.deepcopy(deploy["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{deployment}-dry-run", "namespace": namespace, **template["metadata"]},
        "spec": template["spec"],
    }


async def dry_run_create_pod(client: Client, pod: Obj) -> Obj:
    ns = pod["metadata"]["namespace"]
    return await client.request(
        "POST", resources.POD.path(ns), params={"dryRun": "All"}, body=pod, resource="pods", namespace=ns
    )


def _break(pod: Obj, how: str) -> Obj:
    bad = copy.deepcopy(pod)
    spec = bad["spec"]
    c = spec["containers"][0]
    if how == "privilege-escalation":
        c["securityContext"]["allowPrivilegeEscalation"] = True
    elif how == "root":
        spec["securityContext"]["runAsUser"] = 0
        c["securityContext"]["runAsUser"] = 0
    elif how == "capability":
        c["securityContext"]["capabilities"]["add"] = ["NET_ADMIN"]
    elif how == "no-seccomp":
        del spec["securityContext"]["seccompProfile"]
        del c["securityContext"]["seccompProfile"]
    elif how == "host-path":
        spec["volumes"].append({"name": "host", "hostPath": {"path": "/var/run"}})
    return bad


@pytest.mark.parametrize("deployment", ["mlops-platform", "mlops-activator"])
async def test_the_install_pods_are_admitted_under_restricted(
    admin_client: Client, operator_namespace: str, deployment: str
) -> None:
    """The manager's pod and the activator's, each with its own ServiceAccount."""
    pod = manager_pod(operator_namespace, deployment)
    [sa] = [
        o
        for o in manifests.install_objects(namespace=operator_namespace)
        if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == pod["spec"]["serviceAccountName"]
    ]
    await admin_client.create(resources.SERVICE_ACCOUNT, sa)  # a Pod needs its ServiceAccount to exist
    admitted = await dry_run_create_pod(admin_client, pod)
    assert admitted["spec"]["securityContext"]["runAsNonRoot"] is True
    assert admitted["spec"]["serviceAccountName"] == sa["metadata"]["name"]


@pytest.mark.parametrize("how", ["privilege-escalation", "root", "capability", "no-seccomp", "host-path"])
async def test_a_non_compliant_pod_is_rejected(
    admin_client: Client, operator_namespace: str, how: str
) -> None:
    pod = _break(manager_pod(operator_namespace), how)
    pod["spec"].pop("serviceAccountName")  # rejected for Pod Security, not for a missing account
    with pytest.raises(ApiError) as caught:
        await dry_run_create_pod(admin_client, pod)
    assert caught.value.status == 403, caught.value
    assert f'violates PodSecurity "restricted:{deploy_defaults.POD_SECURITY_VERSION}"' in str(caught.value)


async def test_kustomize_output_is_the_chart_and_the_install_set(kubectl: Kubectl) -> None:
    rc, out, err = await kubectl("kustomize", str(ROOT / "config/default"))
    assert rc == 0, err
    built = by_key(list(yaml.safe_load_all(out)))
    assert built == by_key(helmchart.template(ROOT / deploy_defaults.CHART_DIR))
    assert built == by_key(manifests.install_objects())
