"""The predictor Service ``<name>-predictor``: one stable ClusterIP in front of the pods.

Contract of :func:`build` (pure): a ClusterIP Service with a port named ``http`` on ``spec.port``
whose ``targetPort`` is the container port *by name* (``http``), so during a rollout that changes
the port old and new pods are each reached on their own port, and, where the runtime exports
metrics, a port named ``metrics`` (what the ServiceMonitor scrapes). Its selector is the
component's Deployment's (:func:`labels.selector`), except under the ``replicas`` router while the
route gives the canary a share: then the predictor Service is the route and selects the pods of
both components (:func:`labels.service_selector`), the share being the canary's share of ready
endpoints (:func:`live_weights` reads it back).
``ServiceReady`` is True once the Service exists with a cluster IP (endpoints readiness is the
Deployment's condition).
"""

from __future__ import annotations

from mlops_platform.activator import contract
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.transport import resources

CONDITION = "ServiceReady"
KIND = kinds.Kind.of(resources.SERVICE)
METRICS_PORT = "metrics"

name = base.component_name


def cluster_url(target: base.Target, cluster_domain: str = "cluster.local") -> str:
    """``http://<name>-<component>.<namespace>.svc.<domain>:<port>``."""
    return f"http://{name(target)}.{target.isvc.namespace}.svc.{cluster_domain}:{target.isvc.port}"


def build(target: base.Target, ctx: base.BuildContext) -> base.Obj:
    isvc = target.isvc
    ports: list[base.Obj] = [{"name": "http", "port": isvc.port, "targetPort": "http", "protocol": "TCP"}]
    rt = ctx.server(isvc)
    metrics = rt.ports.get(METRICS_PORT)
    if metrics is not None and rt.metrics_path:
        # the ServiceMonitor scrapes this named port; by name, so a runtime override follows
        ports.append({"name": METRICS_PORT, "port": metrics, "targetPort": METRICS_PORT, "protocol": "TCP"})
    activator = ctx.activator if target.component.parked else None
    annotations = {contract.SERVICE_ANNOTATION: activator} if activator else None
    meta = base.metadata(target, ctx, name(target), annotations)
    if activator:  # the activator takes its traffic (activator.contract)
        meta["labels"][contract.PARKED_KEY] = contract.PARKED_VALUE
    return {
        "apiVersion": resources.SERVICE.api_version,
        "kind": resources.SERVICE.kind,
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(target),
            "ports": ports,
        },
    }


def _selector(target: base.Target) -> dict[str, str]:
    route, key = target.route, target.component.key
    if key == labels.PREDICTOR and route.router is base.Router.REPLICAS and route.weights.get(labels.CANARY):
        if not route.weights.get(labels.PREDICTOR):  # the candidate takes every request
            return labels.selector(target.isvc, labels.CANARY)
        return labels.service_selector(target.isvc)
    return labels.selector(target.isvc, key)


def selected(live: base.Obj | None) -> frozenset[str]:
    """The components a live predictor Service selects (the replicas router's route): the one of
    its selector, or every component when the selector has no component key."""
    selector = ((live or {}).get("spec") or {}).get("selector") or {}
    if not selector:
        return frozenset()
    component = selector.get(labels.COMPONENT)
    return frozenset((component,)) if component else frozenset((labels.PREDICTOR, labels.CANARY))


def condition(
    target: base.Target, ctx: base.BuildContext, desired: base.Obj | None, live: base.Obj | None
) -> base.ChildCondition:
    if live is None:
        return base.not_found(CONDITION, KIND, name(target))
    cluster_ip = (live.get("spec") or {}).get("clusterIP")
    if not cluster_ip or cluster_ip == "None":
        return base.ChildCondition(
            CONDITION, "False", "NoClusterIP", f"Service {name(target)} has no cluster IP"
        )
    return base.ChildCondition(
        CONDITION, "True", "ClusterIPAssigned", f"{cluster_url(target, ctx.cluster_domain)} ({cluster_ip})"
    )


def contribute(target: base.Target, ctx: base.BuildContext, live: base.Obj | None) -> base.Contribution:
    """The cluster-local URL, once the Service has a cluster IP."""
    cluster_ip = ((live or {}).get("spec") or {}).get("clusterIP")
    ok = bool(cluster_ip) and cluster_ip != "None"
    return base.Contribution(url=cluster_url(target, ctx.cluster_domain) if ok else None)


RBAC = base.child_rbac(KIND, why="the predictor Service: watched (owns), applied, repaired, deleted")
CHILD = base.Child("service", KIND, CONDITION, name, build, condition, contribute=contribute)
