"""KEDA in the local cluster: its operator and metrics API server on the real node, from the pinned
module, installed as upstream's minimal install (``config/minimal``, rendered by the pinned
``kubectl kustomize``) with the local images and the real node's placement: its six CRDs, namespace
:data:`NAMESPACE`, RBAC, the operator (which makes and rotates the metrics API server's certificate
and the ``v1beta1.external.metrics.k8s.io`` APIService's CA bundle) and the metrics API server that
serves the HPAs KEDA writes. No admission webhooks (a separate binary upstream marks optional).

The operator's ScaledObjects then really scale: KEDA polls their Prometheus triggers (the local
cluster's Prometheus, :mod:`~mlops_platform.devcluster.monitoring`, which :func:`install` installs
first) to move a Deployment between zero and one, and the HPA it writes moves it above one.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
import sys
import time
from typing import Any

from mlops_platform.devcluster import binaries, cluster, gomod, monitoring
from mlops_platform.devcluster.realnode import configs, images
from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import apiextensions, resources
from mlops_platform.runtime.transport import client as rclient

NAMESPACE = "keda"
MODULE = "github.com/kedacore/keda/v2"
FIELD_MANAGER = "mlops-keda"
APISERVICE = "v1beta1.external.metrics.k8s.io"
APISERVICE_RESOURCE = rclient.Resource(
    "apiregistration.k8s.io", "v1", "apiservices", "APIService", namespaced=False
)
#: upstream's container name -> the local image
_IMAGES = {"keda-operator": images.KEDA, "keda-metrics-apiserver": images.KEDA_METRICS_APISERVER}
Obj = dict[str, Any]


def rendered() -> list[Obj]:
    """Upstream's ``config/minimal`` as the pinned kubectl's kustomize renders it."""
    root = gomod.module_dir("keda", MODULE) / "config" / "minimal"
    kubectl = binaries.find(names=["kubectl"])["kubectl"]
    out = subprocess.run([str(kubectl), "kustomize", str(root)], capture_output=True, text=True, check=True)
    return gomod.parse(out.stdout)


def localized(objs: list[Obj]) -> list[Obj]:
    """``objs`` with the local images (present on the node: never pulled), on the real node, logging
    JSON, the metrics API server trusting the cluster's client CA (below)."""
    out = []
    for obj in map(copy.deepcopy, objs):
        if obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            pod.pop("nodeSelector", None)
            pod.update(copy.deepcopy(configs.PLACEMENT))
            for container in pod["containers"]:
                container["image"] = _IMAGES[container["name"]].ref
                container["imagePullPolicy"] = "IfNotPresent"
                args = container.get("args", [])
                args = ["--zap-encoder=json" if a.startswith("--zap-encoder=") else a for a in args]
                # the local API server proxies with a client certificate of the cluster's CA (no
                # front-proxy CA, no request headers): the adapter takes its client CA from
                # extension-apiserver-authentication, not from KEDA's own CA
                container["args"] = [a for a in args if not a.startswith("--client-ca-file=")]
        out.append(obj)
    return out


def _log(msg: str, started: float) -> None:
    print(f"[keda {time.monotonic() - started:5.1f}s] {msg}", file=sys.stderr, flush=True)


def install(name: str, *, timeout: float = 300.0) -> None:
    """Prometheus' stack (what the triggers query), then KEDA, in cluster ``name`` (idempotent)."""
    monitoring.install(name, timeout=timeout)
    started = time.monotonic()
    binaries.monitoring()
    imported = cluster.import_images(name, [r.name for r in images.AUTOSCALING])
    _log(f"images: {', '.join(imported)}", started)
    asyncio.run(_install(name, timeout, started))


async def _install(name: str, timeout: float, started: float) -> None:
    objs = localized(rendered())
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(name)) as c:
        await apiextensions.install(c, crds, field_manager=FIELD_MANAGER, timeout=timeout)
        c.forget_discovery()
        rest = [o for o in objs if o["kind"] != "CustomResourceDefinition"]
        await c.apply_objects(rest, field_manager=FIELD_MANAGER)
        _log("waiting for the operator and the metrics API server", started)
        await wait.until(lambda: available(c), timeout=timeout, what="KEDA available")
        _log(f"ready: KEDA serves {APISERVICE}", started)


async def available(c: rclient.Client) -> bool:
    """Both Deployments available and the external metrics API served."""
    for deployment in ("keda-operator", "keda-metrics-apiserver"):
        if not objects.condition_is(await c.get(resources.DEPLOYMENT, deployment, NAMESPACE), "Available"):
            return False
    return objects.condition_is(await c.get(APISERVICE_RESOURCE, APISERVICE), "Available")
