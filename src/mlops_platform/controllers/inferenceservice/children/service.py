"""The predictor Service ``<name>-predictor``: one stable ClusterIP in front of the pods.

Contract of :func:`build` (pure): a ClusterIP Service with one port named ``http`` on
``spec.port`` whose ``targetPort`` is the container port *by name* (``http``), so during a rollout
that changes the port old and new pods are each reached on their own port. Its selector is the
Deployment's (:func:`labels.selector`), stable for the life of the CR.
``ServiceReady`` is True once the Service exists with a cluster IP (endpoints readiness is the
Deployment's condition).
"""

from __future__ import annotations

from mlops_platform.api import v1alpha1
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import rbac, resources

CONDITION = "ServiceReady"


def name(isvc: v1alpha1.InferenceService) -> str:
    return labels.predictor_name(isvc)


def cluster_url(isvc: v1alpha1.InferenceService, cluster_domain: str = "cluster.local") -> str:
    """``http://<name>-predictor.<namespace>.svc.<domain>:<port>``."""
    return f"http://{name(isvc)}.{isvc.namespace}.svc.{cluster_domain}:{isvc.spec.port}"


def build(isvc: v1alpha1.InferenceService, ctx: base.BuildContext) -> base.Obj:
    return {
        "apiVersion": resources.SERVICE.api_version,
        "kind": resources.SERVICE.kind,
        "metadata": base.metadata(isvc, ctx, name(isvc)),
        "spec": {
            "type": "ClusterIP",
            "selector": labels.selector(isvc),
            "ports": [{"name": "http", "port": isvc.spec.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def condition(
    isvc: v1alpha1.InferenceService, desired: base.Obj | None, live: base.Obj | None
) -> base.ChildCondition:
    if live is None:
        return base.not_found(CONDITION, resources.SERVICE, name(isvc))
    cluster_ip = (live.get("spec") or {}).get("clusterIP")
    if not cluster_ip or cluster_ip == "None":
        return base.ChildCondition(
            CONDITION, "False", "NoClusterIP", f"Service {name(isvc)} has no cluster IP"
        )
    return base.ChildCondition(CONDITION, "True", "ClusterIPAssigned", f"{cluster_url(isvc)} ({cluster_ip})")


RBAC = rbac.requires(
    "",
    "services",
    ["list", "watch", "create", "patch", "update", "delete"],  # server-side apply that creates needs create
    why="the predictor Service: watched (owns), applied, repaired, deleted",
)
CHILD = base.Child(resources.SERVICE, CONDITION, name, build, condition)
