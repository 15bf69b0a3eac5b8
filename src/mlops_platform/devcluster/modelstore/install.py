"""Install the model store into a local cluster (:mod:`mlops_platform.devcluster.modelstore`)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
import time
from pathlib import Path

from mlops_platform.devcluster import cluster
from mlops_platform.devcluster.modelstore import manifests
from mlops_platform.devcluster.realnode import images
from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

JOB = rclient.Resource("batch", "v1", "jobs", "Job")
FIELD_MANAGER = "mlops-model-store"
#: the images the store and its seeding Job run
IMAGES = [images.PYTHON.name, images.MINIO.name, images.MLSERVER.name, images.OPERATOR.name]


def _log(msg: str, started: float) -> None:
    print(f"[model-store {time.monotonic() - started:5.1f}s] {msg}", file=sys.stderr, flush=True)


def install(name: str, *, timeout: float = 600.0) -> None:
    """The model store in cluster ``name``, with the demo models in it (idempotent)."""
    started = time.monotonic()
    _log(f"images: {', '.join(cluster.import_images(name, IMAGES))}", started)
    asyncio.run(_install(name, timeout, started))


async def _install(name: str, timeout: float, started: float) -> None:
    async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(name)) as c:
        await _create(c, resources.NAMESPACE, manifests.namespace())
        await _root_secret(c)
        for res, obj in (
            (resources.CONFIG_MAP, manifests.scripts()),
            (resources.DEPLOYMENT, manifests.deployment()),
            (resources.SERVICE, manifests.service()),
        ):
            await c.apply(res, obj, field_manager=FIELD_MANAGER)
        _log(f"MinIO: waiting for {manifests.NAMESPACE}/{manifests.SERVICE} to be available", started)
        await wait.until(lambda: _available(c), timeout=timeout, what="the model store's MinIO available")
        job = manifests.seed_job()
        await _create(c, JOB, job)  # exists: it ran or runs (its name is its content)
        _log(f"seeding the demo models: Job {manifests.NAMESPACE}/{objects.name(job)}", started)
        await wait.until(lambda: _complete(c, objects.name(job)), timeout=timeout, what="the demo models")
        _log(f"ready: {manifests.ENDPOINT}, bucket {manifests.BUCKET}", started)


async def _create(c: rclient.Client, res: rclient.Resource, obj: rclient.JSON) -> None:
    """Create ``obj`` unless it exists (409); any other refusal is an error."""
    try:
        await c.create(res, obj)
    except rclient.ApiError as e:
        if not e.conflict:
            raise


async def _root_secret(c: rclient.Client) -> None:
    """MinIO's root credentials: made once per cluster, kept."""
    try:
        await c.get(resources.SECRET, manifests.ROOT_SECRET, manifests.NAMESPACE)
    except rclient.ApiError as e:
        if e.status != 404:
            raise
        secret = manifests.root_secret(f"mlops-{secrets.token_hex(4)}", secrets.token_urlsafe(24))
        await _create(c, resources.SECRET, secret)  # exists: a concurrent install made it


async def _available(c: rclient.Client) -> bool:
    return objects.condition_is(
        await c.get(resources.DEPLOYMENT, manifests.SERVICE, manifests.NAMESPACE), "Available"
    )


async def _complete(c: rclient.Client, job: str) -> bool:
    live = await c.get(JOB, job, manifests.NAMESPACE)
    for type_ in ("Complete", "Failed"):
        cond = objects.condition(live, type_)
        if cond is not None and cond["status"] == "True":
            if type_ == "Failed":
                raise RuntimeError(
                    f"Job {manifests.NAMESPACE}/{job} failed: {cond.get('message')}; "
                    f"{await _pod_logs(c, job)}"
                )
            return True
    return False


async def _pod_logs(c: rclient.Client, job: str) -> str:
    pods = await c.list(resources.POD, manifests.NAMESPACE, label_selector=f"job-name={job}")
    out = []
    for pod in pods["items"][-1:]:
        for container in ("train", "upload"):
            pod_path = resources.POD.path(manifests.NAMESPACE, objects.name(pod))
            path = f"{pod_path}/log?container={container}&tailLines=10"
            with contextlib.suppress(rclient.ApiError):
                out.append(f"{container}: {await c.request_text(path, resource='pods/log', accept='*/*')}")
    return "\n".join(out) or "no pod logs"


async def grant(c: rclient.Client, namespace: str) -> str:
    """The Secret :data:`manifests.CLIENT_SECRET` in ``namespace`` (the store's credentials as the
    storage initializer reads them); returns its name."""
    root = await c.get(resources.SECRET, manifests.ROOT_SECRET, manifests.NAMESPACE)
    await c.apply(resources.SECRET, manifests.client_secret(root, namespace), field_manager=FIELD_MANAGER)
    return manifests.CLIENT_SECRET


async def grant_all(kubeconfig: Path, namespaces: list[str]) -> None:
    """:func:`grant` for each namespace (created when missing)."""
    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        for ns in namespaces:
            await _create(
                c, resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
            await grant(c, ns)
