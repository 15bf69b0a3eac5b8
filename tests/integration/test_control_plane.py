"""The local control plane is a real Kubernetes: real controllers, real scheduler, real GC."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from mlops_platform.devcluster import chaos, cluster, crds, nodes, usage
from mlops_platform.runtime import clock, objects, quantity
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import controlplane, wait


def _deployment(name: str, replicas: int, requests: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/model:1"}
    if requests:
        container["resources"] = {"requests": requests, "limits": requests}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
        },
    }


def _pod_ready(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and objects.condition_is(pod, "Ready")


async def test_deployment_pods_become_ready_through_real_controllers(
    admin_client: rclient.Client, namespace: str
) -> None:
    dep = _deployment("web", replicas=3)
    await admin_client.create(resources.DEPLOYMENT, dep, namespace)

    async def ready_replicas() -> bool:
        live = await admin_client.get(resources.DEPLOYMENT, "web", namespace)
        return int(live.get("status", {}).get("readyReplicas", 0)) == 3

    await wait.until(ready_replicas, timeout=60, what="Deployment web readyReplicas == 3")
    pods = (await admin_client.list(resources.POD, namespace, label_selector="app=web"))["items"]
    assert len(pods) == 3
    assert all(_pod_ready(p) for p in pods), [p["status"] for p in pods]
    # kwok nodes, assigned by the real scheduler
    assert {p["spec"]["nodeName"] for p in pods} <= {n["metadata"]["name"] for n in nodes.fake_nodes()}


async def test_the_metrics_api_serves_the_simulated_usage_of_each_pod(
    admin_client: rclient.Client, namespace: str
) -> None:
    """metrics-server behind the aggregator, scraping kwok's emulated kubelet resource metrics: a
    load of 150 % CPU / 50 % memory of the request on one Deployment's pods, the idle default (1m,
    1Mi) on another's."""
    requests = {"cpu": "200m", "memory": "100Mi"}
    for name, replicas in (("busy", 2), ("calm", 1)):
        await admin_client.create(resources.DEPLOYMENT, _deployment(name, replicas, requests), namespace)
    path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods"

    async def usage_by_app() -> dict[str, list[tuple[float, float]]] | None:
        items = (await admin_client.request("GET", path, resource="pods.metrics.k8s.io"))["items"]
        out: dict[str, list[tuple[float, float]]] = {}
        for pod in items:
            used = pod["containers"][0]["usage"]
            app = pod["metadata"]["name"].split("-")[0]
            out.setdefault(app, []).append(
                (float(quantity.parse(used["cpu"])), float(quantity.parse(used["memory"])))
            )
        return out if sorted((k, len(v)) for k, v in out.items()) == [("busy", 2), ("calm", 1)] else None

    async with usage.loaded(admin_client, usage.make(namespace, {"app": "busy"}, cpu=1.5, memory=0.5)):

        async def loaded() -> dict[str, list[tuple[float, float]]] | None:
            got = await usage_by_app()
            return got if got and all(cpu > 0.25 for cpu, _ in got["busy"]) else None

        got = await wait.until(loaded, timeout=120, what="metrics of 3 pods, the busy ones loaded")
    for cpu, memory in got["busy"]:
        assert abs(cpu - 0.3) < 0.3 * 0.05, cpu  # 150 % of 200m, within 5 %
        assert memory == 50 * 2**20, memory  # 50 % of 100Mi
    [(cpu, memory)] = got["calm"]
    assert cpu < 0.005 and memory == 2**20, (cpu, memory)  # the idle default: 1m, 1Mi


async def test_deleting_an_owner_cascades_through_the_garbage_collector(
    admin_client: rclient.Client, namespace: str
) -> None:
    owner = await admin_client.create(
        resources.CONFIG_MAP,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}},
        namespace,
    )
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for i in range(3):
        await admin_client.create(
            resources.CONFIG_MAP,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"child-{i}", "ownerReferences": [ref], "labels": {"role": "child"}},
            },
            namespace,
        )
    await admin_client.create(
        resources.CONFIG_MAP,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "bystander", "labels": {"role": "child"}},
        },
        namespace,
    )
    await admin_client.delete(resources.CONFIG_MAP, "owner", namespace, propagation_policy="Background")

    async def children_left() -> list[str] | None:
        items = (await admin_client.list(resources.CONFIG_MAP, namespace, label_selector="role=child"))[
            "items"
        ]
        names = sorted(i["metadata"]["name"] for i in items)
        return None if any(n.startswith("child-") for n in names) else names

    # only the dependents go; an object without the owner reference stays
    assert await wait.until(children_left, timeout=60, what="GC of child-* ConfigMaps") == ["bystander"]


async def test_gpu_pods_schedule_only_onto_gpu_nodes(admin_client: rclient.Client, namespace: str) -> None:
    gpu_nodes = {
        n["metadata"]["name"]
        for n in nodes.fake_nodes()
        if n["metadata"]["labels"][nodes.POOL_LABEL] == "gpu"
    }
    await admin_client.create(
        resources.DEPLOYMENT, _deployment("gpu", replicas=4, requests={"nvidia.com/gpu": "1"}), namespace
    )
    # more GPUs than any node has: must stay Pending (Unschedulable), proving capacity is enforced
    await admin_client.create(
        resources.DEPLOYMENT,
        _deployment("too-big", replicas=1, requests={"nvidia.com/gpu": str(nodes.GPUS_PER_NODE + 1)}),
        namespace,
    )

    async def scheduled() -> list[dict[str, Any]] | None:
        pods = (await admin_client.list(resources.POD, namespace, label_selector="app=gpu"))["items"]
        return pods if len(pods) == 4 and all(_pod_ready(p) for p in pods) else None

    pods = await wait.until(scheduled, timeout=60, what="4 GPU pods Ready")
    assert {p["spec"]["nodeName"] for p in pods} <= gpu_nodes

    async def unschedulable() -> bool:
        pods = (await admin_client.list(resources.POD, namespace, label_selector="app=too-big"))["items"]
        conds = pods[0].get("status", {}).get("conditions", []) if pods else []
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)

    await wait.until(unschedulable, timeout=60, what="too-big pod reported Unschedulable")
    pods = (await admin_client.list(resources.POD, namespace, label_selector="app=too-big"))["items"]
    assert not pods[0]["spec"].get("nodeName")


async def test_third_party_crds_are_established(admin_client: rclient.Client) -> None:
    for name in crds.names():
        crd = await admin_client.get(resources.CRD, name)
        conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conds.get("Established") == "True", name
    # and the API serves them: a real VirtualService kind is discoverable
    vs = await admin_client.resource_for("networking.istio.io/v1", "VirtualService")
    assert vs.plural == "virtualservices"


async def test_rbac_is_enforced_and_service_account_tokens_are_signed(
    admin_client: rclient.Client, namespace: str, kube_cluster: Any
) -> None:
    await admin_client.create(
        resources.SERVICE_ACCOUNT,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}},
        namespace,
    )
    token_request = await admin_client.request(
        "POST",
        resources.SERVICE_ACCOUNT.path(namespace, "nobody", "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
        resource="serviceaccounts/token",
    )
    token = token_request["status"]["token"]
    assert token.count(".") == 2  # a signed JWT
    review = await admin_client.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{namespace}:nobody",
                "resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "pods"},
            },
        },
        resource="subjectaccessreviews",
    )
    assert review["status"]["allowed"] is False  # RBAC on: no binding, no access


async def test_dev_up_starts_again_a_component_that_is_not_running(
    admin_client: rclient.Client, local_cluster_name: str
) -> None:
    """kwokctl never restarts a component, and metrics-server exits when kube-apiserver does not
    answer yet as it starts (a loaded machine). ``dev up`` finds it not running and starts it again
    (``kwokctl start cluster``, its stale PID file removed) before it waits for its port."""
    before = cluster.component_pid(local_cluster_name, "metrics-server")
    chaos.stop_component(local_cluster_name, "metrics-server")
    assert not cluster.component_running(local_cluster_name, "metrics-server")
    await asyncio.to_thread(cluster.up, local_cluster_name)
    assert cluster.component_running(local_cluster_name, "metrics-server")
    assert cluster.component_pid(local_cluster_name, "metrics-server") != before
    path = "/apis/metrics.k8s.io/v1beta1/nodes"

    async def served() -> bool:  # the aggregator proxies to metrics-server: 503 while it is down
        answer = await admin_client.request("GET", path, resource="nodes.metrics.k8s.io")
        return bool(answer["kind"] == "NodeMetricsList")

    await wait.until(served, timeout=60, what="the metrics API served by the restarted metrics-server")


async def test_a_leader_elected_component_that_exited_is_started_again_and_leads(
    admin_client: rclient.Client, local_cluster_name: str
) -> None:
    """kube-scheduler exits when it cannot renew its Lease (kube-apiserver down too long): what a
    test that stopped kube-apiserver waits on (``testing.controlplane.leaders_back``) starts it
    again, as the kubelet would, and returns once the new process renewed the Lease."""
    spec = chaos.component_spec(local_cluster_name, "kube-scheduler")
    before = cluster.component_pid(local_cluster_name, "kube-scheduler")
    chaos.stop_component(local_cluster_name, "kube-scheduler")
    since = clock.utcnow()
    await controlplane.leaders_back(admin_client, local_cluster_name, [spec], since)
    assert cluster.component_pid(local_cluster_name, "kube-scheduler") != before
    lease = await admin_client.get(resources.LEASE, "kube-scheduler", "kube-system")
    assert datetime.datetime.fromisoformat(lease["spec"]["renewTime"]) > since
