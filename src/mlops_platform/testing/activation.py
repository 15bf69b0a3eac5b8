"""The activator on the local cluster, for the e2e and ``bench.wake``: installed from the operator's
image (:func:`installed`), whether a Service is parked behind it (:func:`parked`, :func:`unparked`),
and its own request counts (:func:`counts`, read through the API server's service proxy)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mlops_platform.activator import contract
from mlops_platform.deploy import activator
from mlops_platform.devcluster import cluster
from mlops_platform.devcluster.realnode import configs, images
from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

NAMESPACE = "mlops-activator"
#: what the operator's ``--activator`` names
SERVICE = f"{NAMESPACE}/{activator.NAME}"
FIELD_MANAGER = "mlops-platform-tests"


@contextlib.asynccontextmanager
async def installed(c: rclient.Client, cluster_name: str, *, timeout: float = 180.0) -> AsyncIterator[str]:
    """The activator in :data:`NAMESPACE` on the real node, rolled out and available, for the block
    (:data:`SERVICE` yielded); afterwards its namespace and its cluster-wide RBAC are deleted (an
    install set in the same cluster has a ClusterRole and binding of the same name)."""
    await asyncio.to_thread(cluster.import_images, cluster_name, [images.OPERATOR.name])
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    objs = activator.objects(NAMESPACE, images.OPERATOR.ref, placement=configs.PLACEMENT)
    try:
        await c.apply_objects([ns, *objs], field_manager=FIELD_MANAGER)

        async def available() -> bool:
            live = await c.get(resources.DEPLOYMENT, activator.NAME, NAMESPACE)
            st = live.get("status") or {}
            current = (
                st.get("observedGeneration", 0) >= objects.generation(live) and st.get("updatedReplicas") == 1
            )
            return current and objects.condition_is(live, "Available")

        await wait.until(available, timeout=timeout, what="the activator available")
        yield SERVICE
    finally:
        for res, name, namespace in (
            (resources.NAMESPACE, NAMESPACE, None),
            (resources.CLUSTER_ROLE_BINDING, activator.NAME, None),
            (resources.CLUSTER_ROLE, activator.NAME, None),
        ):
            try:
                await c.delete(res, name, namespace)
            except rclient.ApiError as e:
                if not e.not_found:  # never created (a failed apply): nothing to delete
                    raise


async def _parking_slice(c: rclient.Client, ns: str, service: str) -> dict[str, Any] | None:
    try:
        return await c.get(resources.ENDPOINT_SLICE, f"{service}-activator", ns)
    except rclient.ApiError as e:
        if e.not_found:
            return None
        raise


def _labelled(svc: dict[str, Any]) -> bool:
    return (svc["metadata"].get("labels") or {}).get(contract.PARKED_KEY) == contract.PARKED_VALUE


async def parked(c: rclient.Client, ns: str, service: str) -> bool:
    """The Service is labelled parked and its traffic goes to the activator (its parking slice)."""
    svc = await c.get(resources.SERVICE, service, ns)
    slice_ = await _parking_slice(c, ns, service)
    return _labelled(svc) and slice_ is not None and bool(slice_.get("endpoints"))


async def unparked(c: rclient.Client, ns: str, service: str) -> bool:
    """Neither the label nor the parking slice: the Service points at the model alone."""
    svc = await c.get(resources.SERVICE, service, ns)
    return not _labelled(svc) and await _parking_slice(c, ns, service) is None


async def counts(c: rclient.Client) -> dict[str, float]:
    """The activator's requests by result (``forwarded``, ``not_ready``, ...), from its metrics."""
    path = f"/api/v1/namespaces/{NAMESPACE}/services/http:{activator.NAME}:admin/proxy/metrics"
    text = await c.request_text(path, resource="services/proxy")
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("mlops_activator_requests_total{"):
            out[line.split('result="', 1)[1].split('"', 1)[0]] = float(line.split()[-1])
    return out
