"""What the real nodes need in the cluster itself: the cluster DNS (CoreDNS, as kubeadm installs it,
on the real node) and the read-only RBAC of the NetworkPolicy agent. Applied with server-side apply
by ``dev up`` (idempotent)."""

from __future__ import annotations

import copy
import functools
from importlib import resources as importlib_resources
from typing import Any

import yaml

from mlops_platform.devcluster.realnode import configs, images
from mlops_platform.devcluster.realnode.addressing import Block
from mlops_platform.runtime import objects
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

FIELD_MANAGER = "mlops-platform-dev"
KUBE_ROUTER_USER = "mlops:kube-router"
DNS_NAMESPACE = "kube-system"
DNS_DEPLOYMENT = "coredns"


@functools.cache
def _manifest(name: str) -> tuple[dict[str, Any], ...]:
    package = importlib_resources.files("mlops_platform.devcluster.realnode")
    text = package.joinpath("manifests", name).read_text()
    return tuple(d for d in yaml.safe_load_all(text) if d)


def coredns_objects(block: Block) -> list[dict[str, Any]]:
    """kubeadm's CoreDNS objects, with the block's DNS address, the local image, the real node."""
    docs = [copy.deepcopy(d) for d in _manifest("coredns.yaml")]
    for d in docs:
        if d["kind"] == "Service":
            d["spec"]["clusterIP"] = block.dns_service_ip
        if d["kind"] == "Deployment":
            pod = d["spec"]["template"]["spec"]
            pod["containers"][0]["image"] = images.COREDNS.ref
            pod["tolerations"].append({**configs.REAL_NODE_TAINT, "operator": "Equal"})
            pod["nodeSelector"] = {"kubernetes.io/os": "linux", configs.REAL_NODE_LABEL: "true"}
    return docs


def kube_router_objects() -> list[dict[str, Any]]:
    return [copy.deepcopy(d) for d in _manifest("kube-router.yaml")]


async def install(c: rclient.Client, block: Block) -> None:
    await c.apply_objects([*kube_router_objects(), *coredns_objects(block)], field_manager=FIELD_MANAGER)


async def dns_available(c: rclient.Client) -> bool:
    dep = await c.get(resources.DEPLOYMENT, DNS_DEPLOYMENT, DNS_NAMESPACE)
    ready = int((dep.get("status") or {}).get("readyReplicas", 0))
    return objects.condition_is(dep, "Available") and ready >= 1
