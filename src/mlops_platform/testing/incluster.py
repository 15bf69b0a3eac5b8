"""The operator installed IN the local cluster, as users install it (Helm, ``mlops-platform manifests``,
kustomize), running on the real node from the locally built image: what a test waits on and checks.

- :data:`NAMESPACE`: where the e2e installs it; the API server's audit log keeps every request of its
  ServiceAccounts (``devcluster.clusterconfig.IN_CLUSTER_NAMESPACE``), so :func:`forbidden` can
  prove from the server's side that the generated RBAC refused the operator nothing.
- :func:`import_images`: the operator image under its tag and :data:`UPGRADE_TAG` on every real node.
- :func:`rolled_out`: exactly ``replicas`` pods of the image, each Running and Ready on a real node,
  none terminating; :func:`leader`: the pod holding the leader Lease.
- :func:`leftovers`: what an uninstall left of the install set (the CRD is not counted: Helm keeps it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlops_platform.api import crd
from mlops_platform.deploy import activator, defaults
from mlops_platform.devcluster import binaries, cluster, clusterconfig
from mlops_platform.devcluster.realnode import configs, imagebuild, images
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import realnode, wait

NAMESPACE = clusterconfig.IN_CLUSTER_NAMESPACE
IMAGE = images.OPERATOR.ref
#: a second tag of the operator image: what ``helm upgrade`` rolls the operator to
UPGRADE_TAG = f"{images.OPERATOR.tag}-upgrade"
UPGRADE_IMAGE = images.OPERATOR.ref_with(UPGRADE_TAG)
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{defaults.NAME}"
MANAGER_SELECTOR = f"app.kubernetes.io/name={defaults.NAME},app.kubernetes.io/component=manager"
ACTIVATOR_SELECTOR = f"app.kubernetes.io/name={activator.NAME}"
#: the chart's values that put the operator on the real node: its taint tolerated, its label selected
PLACEMENT: dict[str, Any] = configs.PLACEMENT
#: the same placement as ``deploy.install.install_objects`` arguments (the default selector kept)
PLACEMENT_ARGS: dict[str, Any] = {
    "node_selector": {"kubernetes.io/os": "linux", **configs.PLACEMENT["nodeSelector"]},
    "tolerations": configs.PLACEMENT["tolerations"],
}


def import_images(cluster_name: str) -> list[str]:
    """The operator image (built when its source changed) on every real node, under its own tag and
    :data:`UPGRADE_TAG`."""
    name = images.OPERATOR.name
    return cluster.import_images(cluster_name, [name, f"{name}:{UPGRADE_TAG}"])


#: what the operator image must not hold (the Dockerfile's promise: no compiler, no pip)
_BUILD_TOOLS = ("pip", "gcc", "gcc-12", "cpp", "cpp-12", "binutils", "make", "python3-pip", "python3-dev")


def build_tools_in_image() -> list[str]:
    """The build tools among the operator image's packages (``packages.txt`` of its cache entry:
    Debian's ``dpkg-query`` and the venv's distributions, ``pip:NAME``)."""
    listed = (imagebuild.entry(images.OPERATOR) / "packages.txt").read_text().splitlines()
    names = {line.split("\t")[0].removeprefix("pip:").lower() for line in listed}
    return sorted(names & set(_BUILD_TOOLS))


async def manager_pods(client: rclient.Client, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    return list((await client.list(resources.POD, namespace, label_selector=MANAGER_SELECTOR))["items"])


def describe(pods: list[dict[str, Any]]) -> str:
    """One line per pod: name, image, node, phase, ready, terminating (for a timeout's message)."""
    return "; ".join(
        f"{p['metadata']['name']} {p['spec']['containers'][0]['image']} on {p['spec'].get('nodeName')}"
        f" {(p.get('status') or {}).get('phase')} ready={realnode.is_ready(p)}"
        + (" terminating" if p["metadata"].get("deletionTimestamp") else "")
        for p in pods
    )


async def rolled_out(client: rclient.Client, image: str, replicas: int, namespace: str = NAMESPACE) -> bool:
    """Exactly ``replicas`` manager pods, all of ``image``, Running and Ready on real nodes; none
    other (an old one terminating counts against it)."""
    pods = await manager_pods(client, namespace)
    real = set(await real_nodes(client))
    return len(pods) == replicas and all(
        p["spec"]["containers"][0]["image"] == image
        and p["spec"].get("nodeName") in real
        and not p["metadata"].get("deletionTimestamp")
        and realnode.is_ready(p)
        for p in pods
    )


async def activator_ready(client: rclient.Client, image: str, namespace: str = NAMESPACE) -> bool:
    """The install's activator: one pod of ``image``, Ready (its watches synced) on a real node."""
    pods = (await client.list(resources.POD, namespace, label_selector=ACTIVATOR_SELECTOR))["items"]
    real = set(await real_nodes(client))
    return len(pods) == 1 and all(
        p["spec"]["containers"][0]["image"] == image
        and p["spec"].get("nodeName") in real
        and not p["metadata"].get("deletionTimestamp")
        and realnode.is_ready(p)
        for p in pods
    )


async def real_nodes(client: rclient.Client) -> list[str]:
    label = ",".join(f"{k}={v}" for k, v in configs.PLACEMENT["nodeSelector"].items())
    return [n["metadata"]["name"] for n in (await client.list(resources.NODE, label_selector=label))["items"]]


async def leader(client: rclient.Client, namespace: str = NAMESPACE) -> str:
    """The manager pod holding the leader Lease ("" while none does): its identity is
    ``<pod name>_<n>``."""
    try:
        lease = await client.get(resources.LEASE, defaults.LEADER_ELECTION_ID, namespace)
    except rclient.ApiError as e:
        if e.not_found:
            return ""
        raise
    holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
    pods = {p["metadata"]["name"] for p in await manager_pods(client, namespace)}
    name = holder.rpartition("_")[0]
    return name if name in pods else ""


async def leftovers(client: rclient.Client, namespace: str = NAMESPACE) -> list[str]:
    """What is left of an install in ``namespace`` after its uninstall: the namespace itself (gone
    once its objects are), and the cluster-scoped RBAC of the install set."""
    left = []
    try:
        ns = await client.get(resources.NAMESPACE, namespace)
        left.append(f"Namespace {namespace} ({(ns.get('status') or {}).get('phase')})")
    except rclient.ApiError as e:
        if not e.not_found:
            raise
    for res in (resources.CLUSTER_ROLE, resources.CLUSTER_ROLE_BINDING):
        for obj in (await client.list(res))["items"]:
            name = obj["metadata"]["name"]
            if name.startswith(f"{defaults.NAME}-") or name == activator.NAME:
                left.append(f"{res.kind} {name}")
    return left


def audit_entries(cluster_name: str, username: str = SERVICE_ACCOUNT) -> list[dict[str, Any]]:
    """Every audit entry of ``username`` (all its requests: see :data:`NAMESPACE`)."""
    out = []
    for path in cluster.audit_logs(cluster_name):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if (entry.get("user") or {}).get("username") == username:
                out.append(entry)
    return out


#: the audit annotation with the authorizer's decision on a request (``allow`` or ``forbid``)
DECISION = "authorization.k8s.io/decision"


def forbidden(entries: list[dict[str, Any]]) -> list[str]:
    """The requests of ``entries`` that RBAC refused (the authorizer's decision ``forbid``), and any
    other 403 but admission's refusal to create in a namespace being deleted (a 403 too, and what an
    Event about an object of a namespace going away meets): verb, object, message."""
    out = []
    for e in entries:
        status = e.get("responseStatus") or {}
        refused = (e.get("annotations") or {}).get(DECISION) == "forbid"
        terminating = "because it is being terminated" in str(status.get("message", ""))
        if refused or (int(status.get("code") or 0) == 403 and not terminating):
            ref = json.dumps(e.get("objectRef") or {}, sort_keys=True)
            out.append(f"{e['verb']} {ref}: {status.get('message', '')}")
    return out


def chart_dir() -> Path:
    root = binaries.repo_root()
    if root is None:
        raise FileNotFoundError("the chart is installed from a source checkout")
    return root / defaults.CHART_DIR


async def until_serving(
    client: rclient.Client, image: str, replicas: int = 2, namespace: str = NAMESPACE, timeout: float = 180
) -> None:
    """:func:`rolled_out`, a leader, the API server converting through the webhook Service, and
    :func:`activator_ready`; on a timeout an AssertionError describing the pods."""

    async def ok() -> bool:
        return (
            await rolled_out(client, image, replicas, namespace)
            and bool(await leader(client, namespace))
            and await crd.converts(client)
            and await activator_ready(client, image, namespace)
        )

    try:
        await wait.until(
            ok, timeout=timeout, what=f"{replicas} operator pods and the activator of {image} serving"
        )
    except TimeoutError as e:
        pods = await manager_pods(client, namespace)
        pods += (await client.list(resources.POD, namespace, label_selector=ACTIVATOR_SELECTOR))["items"]
        raise AssertionError(f"{e}: {describe(pods)}") from e


async def until_reconciled(client: rclient.Client, namespace: str, name: str) -> dict[str, Any]:
    """The InferenceService's status observed its current generation (whatever its Ready state);
    the object, read in the storage version."""

    async def current() -> dict[str, Any] | None:
        obj = await client.get(crd.RESOURCE, name, namespace)
        status = obj.get("status") or {}
        return obj if status.get("observedGeneration") == obj["metadata"]["generation"] else None

    return await wait.until(current, timeout=60, what=f"{namespace}/{name} reconciled")


async def until_uninstalled(client: rclient.Client, namespace: str = NAMESPACE) -> None:
    """Nothing of the install left (:func:`leftovers`), the CRD kept (with every InferenceService)."""

    async def gone() -> bool:
        return not await leftovers(client, namespace)

    try:
        await wait.until(gone, timeout=120, what="nothing but the CRD left")
    except TimeoutError as e:
        raise AssertionError(f"{e}: {await leftovers(client, namespace)}") from e
    await client.get(resources.CRD, crd.CRD_NAME)
