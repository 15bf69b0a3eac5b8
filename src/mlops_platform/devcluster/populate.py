"""What a started local cluster is filled with (:func:`populate`, run by
:func:`~mlops_platform.devcluster.cluster.up` on a new and on a running cluster alike): kwok's
upstream default stages, the fake nodes (an existing node of an older cluster gets what
metrics-server needs to scrape it), kwok's resource metrics and the simulated usage when the cluster
serves the metrics API, and the third-party CRDs; then it waits for the nodes to be Ready and the
metrics API to be Available."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlops_platform.devcluster import crds, nodes, usage
from mlops_platform.runtime import objects
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

FIELD_MANAGER = "mlops-platform-dev"


async def populate(
    kubeconfig: Path,
    name: str,
    *,
    install_crds: bool,
    wait: float,
    cpu_nodes: int,
    progress: Callable[[str], None],
) -> None:
    """Fill the cluster ``name`` (reached with ``kubeconfig``) as the module says; ``progress``
    gets a line per step."""
    fake = nodes.fake_nodes(cpu_nodes)
    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        progress(f"installing kwok stages (upstream defaults) and {len(fake)} fake nodes")
        for stage in nodes.default_stages():
            await _apply(c, stage)
        for node in fake:
            try:
                await c.create(resources.NODE, node)
            except rclient.ApiError as e:
                if not e.conflict:
                    raise
                # a node of an older cluster: add what metrics-server needs to scrape it
                meta = {"annotations": node["metadata"]["annotations"]}
                await c.patch(resources.NODE, objects.name(node), {"metadata": meta})
        has_metrics = await usage.metrics_api_registered(c)
        if has_metrics:
            progress("installing kwok's resource metrics (upstream Metric) and the simulated usage")
            await usage.install(c)
        else:
            why = "created --without-metrics-server, or before metrics-server came: re-create it for one"
            progress(f"cluster {name!r} has no metrics API ({why})")
        if install_crds:
            progress(
                "installing third-party CRDs (Istio, Prometheus Operator, Gateway API, KEDA, cert-manager)"
            )
            await crds.install(c)
        progress("waiting for the nodes to be Ready")
        await nodes.wait_ready(c, [objects.name(n) for n in fake], timeout=wait)
        if has_metrics:
            progress("waiting for the metrics API (metrics-server) to be Available")
            await usage.wait_metrics_api(c, timeout=wait)


async def _apply(c: rclient.Client, obj: dict[str, Any]) -> None:
    await c.apply_objects([obj], field_manager=FIELD_MANAGER)
