"""What a live predictor Deployment (:mod:`~.deployment`) says of its rollout (pure).

- :func:`serving_model`: the model every available pod runs (what a router may send the
  component's share to); :func:`rolled_out_model`: the model of a fully completed rollout (the
  component's contribution to the status, :func:`contribute`).
- :func:`replacing`: a ``RollingOut`` condition of a Deployment that rolls out nothing (replicas
  being replaced or added) told apart from a rollout.
"""

from __future__ import annotations

from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import objects


def replacing(
    cond: base.ChildCondition, live: base.Obj | None, active_version: str | None
) -> base.ChildCondition:
    """``cond`` (of :func:`~.deployment.condition`), unless it says ``RollingOut`` of a Deployment
    that rolls out nothing: replicas lost (with their node, evicted, deleted) being replaced.
    Kubernetes reports a replacement like a rollout (``updatedReplicas`` drops, then ``Progressing``
    turns ``ReplicaSetUpdated`` until the new pods are available), but the template is the one
    already rolled out (the status' ``activeVersion``), its generation observed, and no replica of
    an older template is left. Its availability then says what is wrong: ``NoReplicasAvailable``
    (False) or ``PartiallyAvailable`` (True, serving), with the count starting. (A scale-up looks
    the same for a moment, before the ReplicaSet has created its pods: not a rollout either.)"""
    if cond.reason != "RollingOut" or live is None or not active_version:
        return cond
    spec, st = live.get("spec") or {}, live.get("status") or {}
    if int(st.get("observedGeneration") or 0) < objects.generation(live) or _model_of(spec) != active_version:
        return cond
    want, ready = int(spec.get("replicas", 1)), int(st.get("availableReplicas") or 0)
    if int(st.get("replicas") or 0) > int(st.get("updatedReplicas") or 0) or ready >= want:
        return cond  # old replicas left: a rollout; all available: its last step
    summary = (
        f"{ready}/{want} replicas available, {want - ready} starting; no rollout ({active_version} is "
        "rolled out): replicas replaced or added"
    )
    if ready == 0:
        return base.ChildCondition(cond.type, "False", "NoReplicasAvailable", summary)
    return base.ChildCondition(cond.type, "True", "PartiallyAvailable", summary)


def contribute(target: base.Target, ctx: base.BuildContext, live: base.Obj | None) -> base.Contribution:
    """The component's replica counts and the model it has fully rolled out."""
    live = live or {}
    st = live.get("status") or {}
    counts = base.Replicas(
        replicas=int(st.get("replicas") or 0),
        ready=int(st.get("readyReplicas") or 0),
        desired=int((live.get("spec") or {}).get("replicas") or 0),
    )
    model = rolled_out_model(live) if target.component.min_replicas > 0 else None
    return base.Contribution(replicas=counts, rolled_out_model=model)


def serving_model(deployment: base.Obj) -> str | None:
    """The MODEL_URI every pod of the Deployment runs, once at least one is available: its current
    template's, when the controller has observed it and no pod of an older template is left. A
    scale-up does not change it (new pods run the same template); a model change does, until the
    old pods are gone. What a router may send a component's share to."""
    if not deployment:
        return None
    spec, st = deployment.get("spec") or {}, deployment.get("status") or {}
    current = (
        int(st.get("observedGeneration") or 0) >= objects.generation(deployment)
        and int(st.get("updatedReplicas") or 0) == int(st.get("replicas") or 0)
        and int(st.get("availableReplicas") or 0) > 0
    )
    return _model_of(spec) if current else None


def rolled_out_model(deployment: base.Obj) -> str | None:
    """The MODEL_URI of the Deployment's template once its rollout has fully completed."""
    if not deployment:
        return None
    spec, st = deployment.get("spec") or {}, deployment.get("status") or {}
    want = int(spec.get("replicas") or 0)
    complete = (
        int(st.get("observedGeneration") or 0) >= objects.generation(deployment)
        and want > 0
        and int(st.get("updatedReplicas") or 0) == want
        and int(st.get("replicas") or 0) == want
        and int(st.get("availableReplicas") or 0) == want
    )
    return _model_of(spec) if complete else None


def _model_of(spec: base.Obj) -> str | None:
    for container in (spec.get("template") or {}).get("spec", {}).get("containers") or ():
        for env in container.get("env") or ():
            if env.get("name") == "MODEL_URI" and env.get("value"):
                return str(env["value"])
    return None
