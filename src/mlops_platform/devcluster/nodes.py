"""The fake nodes and kwok stages of the local cluster."""

from __future__ import annotations

from typing import Any

from mlops_platform.devcluster import gomod
from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

CPU_NODES = 3
GPU_NODES = 2
GPUS_PER_NODE = 8
POOL_LABEL = "mlops.platform/pool"
#: what marks a fake node; kwok manages only the nodes it selects (never a real node)
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_NODE_SELECTOR = f"{FAKE_NODE_ANNOTATION}=fake"
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"

# Upstream kwok stages (files of sigs.k8s.io/kwok at the pinned version), the same set kwokctl
# installs by default: fast node start, heartbeat with Lease, pods Ready / Completed / deleted.
_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)


def default_stages() -> list[dict[str, Any]]:
    return [d for rel in _STAGE_FILES for d in gomod.documents("kwok", "sigs.k8s.io/kwok", rel)]


def _node(name: str, pool: str, extra: dict[str, str]) -> dict[str, Any]:
    capacity = {"cpu": "32", "memory": "256Gi", "pods": str(PODS_PER_NODE), "ephemeral-storage": "1Ti"}
    capacity |= extra
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                FAKE_NODE_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                # where metrics-server scrapes this node's resource metrics: kwok serves them per node
                # (the path of upstream's Metric ``metrics-resource``; kwokctl's own nodes carry it too)
                RESOURCE_METRICS_PATH_ANNOTATION: f"/metrics/nodes/{name}/metrics/resource",
            },
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "",
                "type": "kwok",
                POOL_LABEL: pool,
                **({"nvidia.com/gpu.present": "true"} if pool == "gpu" else {}),
            },
        },
        "spec": {},
        "status": {
            "allocatable": capacity,
            "capacity": capacity,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake"},
        },
    }


PODS_PER_NODE = 250


def fake_nodes(cpu_nodes: int = CPU_NODES) -> list[dict[str, Any]]:
    """``cpu_nodes`` CPU nodes (default 3) and 2 GPU nodes (``nvidia.com/gpu`` capacity), managed by
    kwok, each with room for :data:`PODS_PER_NODE` pods."""
    cpu = [_node(f"kwok-cpu-{i}", "cpu", {}) for i in range(cpu_nodes)]
    gpu = [_node(f"kwok-gpu-{i}", "gpu", {"nvidia.com/gpu": str(GPUS_PER_NODE)}) for i in range(GPU_NODES)]
    return cpu + gpu


def is_ready(node: dict[str, Any]) -> bool:
    return objects.condition_is(node, "Ready")


async def wait_ready(
    c: rclient.Client, names: list[str], *, timeout: float, label_selector: str = "type=kwok"
) -> None:
    """Wait until every named node reports Ready=True (TimeoutError names the laggards)."""
    pending = set(names)

    async def all_ready() -> bool:
        listing = await c.list(resources.NODE, label_selector=label_selector)
        ready = {objects.name(n) for n in listing.get("items", []) if is_ready(n)}
        pending.clear()
        pending.update(set(names) - ready)
        return not pending

    try:
        await wait.until(all_ready, timeout=timeout, interval=0.5, what="nodes Ready")
    except TimeoutError:
        raise TimeoutError(f"nodes not Ready after {timeout:.0f}s: {sorted(pending)}") from None
