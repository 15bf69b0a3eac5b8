"""The predictor HorizontalPodAutoscaler (autoscaling/v2) ``<name>-predictor``.

Contract of :func:`build` (pure): desired only when the HPA owns the replica count
(:func:`base.replica_owner`: ``maxReplicas > minReplicas >= 1``); otherwise
``None`` (a fixed replica count needs no autoscaler, and minReplicas 0 means scaled to zero, which
an HPA cannot express: its minReplicas is at least 1), so the reconciler deletes a stale one.
It scales the component's Deployment on average CPU utilization (the InferenceService's target,
else the runtime table's, 80 % by default; the Deployment always carries a CPU request for it) and,
when the InferenceService sets a memory target, on average memory utilization too (the HPA takes
the larger replica count of the two). A canary's HPA has the same targets.
``AutoscalerReady`` follows the HPA's ``AbleToScale`` and ``ScalingActive`` conditions, and is
True with reason ``NotRequired`` when no HPA is wanted.
"""

from __future__ import annotations

from mlops_platform.controllers.inferenceservice.children import base, deployment
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.transport import resources

CONDITION = "AutoscalerReady"
KIND = kinds.Kind.of(resources.HPA)

name = base.component_name


def build(target: base.Target, ctx: base.BuildContext) -> base.Obj | None:
    component = target.component
    if base.replica_owner(component) is not base.ReplicaOwner.HPA:
        return None
    return {
        "apiVersion": resources.HPA.api_version,
        "kind": resources.HPA.kind,
        "metadata": base.metadata(target, ctx, name(target)),
        "spec": {
            "scaleTargetRef": deployment.scale_target_ref(target),
            "minReplicas": component.min_replicas,
            "maxReplicas": component.max_replicas,
            "metrics": [_utilization(resource, percent) for resource, percent in targets(target, ctx)],
        },
    }


def targets(target: base.Target, ctx: base.BuildContext) -> list[tuple[str, int]]:
    """(resource, average utilization in percent of the request) the HPA scales on: CPU always
    (the InferenceService's target, else the runtime's), memory when the InferenceService sets one
    (v1 ``spec.predictor.autoscaling.targetUtilization{cpu, memory}``; v1beta1
    ``targetCPUUtilization``)."""
    wanted = target.isvc.autoscaling
    cpu = wanted.cpu_utilization
    out = [("cpu", ctx.server(target.isvc).target_cpu_utilization if cpu is None else cpu)]
    if wanted.memory_utilization is not None:
        out.append(("memory", wanted.memory_utilization))
    return out


def _utilization(resource: str, percent: int) -> base.Obj:
    return {
        "type": "Resource",
        "resource": {"name": resource, "target": {"type": "Utilization", "averageUtilization": percent}},
    }


def condition(
    target: base.Target, ctx: base.BuildContext, desired: base.Obj | None, live: base.Obj | None
) -> base.ChildCondition | None:
    s = target.component
    if desired is None and base.replica_owner(s) is base.ReplicaOwner.KEDA:
        return None  # the ScaledObject reports AutoscalerReady
    if desired is None:
        if s.min_replicas == 0:
            why = "minReplicas is 0: scaled to zero, nothing to autoscale"
        else:
            why = f"fixed replica count: minReplicas == maxReplicas == {s.min_replicas}"
        return base.ChildCondition(CONDITION, "True", "NotRequired", why)
    if live is None:
        return base.not_found(CONDITION, KIND, name(target))
    able = objects.condition(live, "AbleToScale")
    active = objects.condition(live, "ScalingActive")
    for cond, fallback in ((able, "NotAbleToScale"), (active, "ScalingInactive")):
        if cond is not None and cond.get("status") == "False":
            return base.ChildCondition(
                CONDITION, "False", cond.get("reason") or fallback, cond.get("message", "")
            )
    if able is None or active is None or "Unknown" in (able.get("status"), active.get("status")):
        msg = "the HorizontalPodAutoscaler controller has not evaluated it yet"
        return base.ChildCondition(CONDITION, "Unknown", "Pending", msg)
    message = str(active.get("message") or "")
    limited = objects.condition(live, "ScalingLimited")
    if limited is not None and limited.get("status") == "True" and limited.get("message"):
        message = f"{message}; {limited['message']}" if message else str(limited["message"])
    return base.ChildCondition(CONDITION, "True", "ScalingActive", message)


RBAC = base.child_rbac(
    KIND, why="the predictor HPA: watched (owns), applied, repaired, deleted when not desired"
)
# the autoscaler's health (e.g. no metrics yet) is reported, but does not stop a service serving
CHILD = base.Child("autoscaler", KIND, CONDITION, name, build, condition, serving=False)
