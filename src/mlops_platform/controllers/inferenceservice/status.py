"""The InferenceService status, computed from what the children report (pure).

Decision table of ``Ready`` (first match wins):

1. a child write or a list/watch failed -> ``False/ReconcileFailed`` (and ``Reconciled=False``
   with the HTTP reason);
2. ``minReplicas == 0`` -> ``False/ScaledToZero``;
3. a predictor pod is failing (its storage initializer failed: ModelDownloadFailed with the
   initializer's message; CrashLoopBackOff, image pull errors, ...) -> ``False/<that reason>``;
4. a serving child's condition is False -> ``False/<its reason>``;
5. at least one ready replica and every serving condition True -> ``True/Serving``;
6. otherwise -> ``False/Waiting``.

Per-slot conditions come from each child; slots sharing a condition type (``MonitoringReady``)
are merged, the worst status winning (False, then Unknown, then True). A wanted child of an
optional kind whose CRD is absent reports ``False/CRDNotInstalled`` naming the kind; one whose
informer is still listing reports ``Unknown/WaitingForCache``. Replicas, the url and the rolled-out
model come from the predictor component's contributions (:class:`base.Contribution`). The pods'
causes (rule 3) are :mod:`~mlops_platform.controllers.inferenceservice.pod_problems`'.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Literal

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import canary_plan, conditions, labels, pod_problems, traffic
from mlops_platform.controllers.inferenceservice.children import (
    base,
    deployment,
    deployment_rollout,
    scaledobject,
)
from mlops_platform.runtime import objects
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient

_SEVERITY = {"False": 0, "Unknown": 1, "True": 2}


@dataclasses.dataclass(frozen=True, slots=True)
class Observed:
    """One slot after its sync: desired (None = not wanted) and live objects."""

    slot: base.Slot
    desired: Obj | None
    live: Obj | None
    #: "served"; for an optional kind also "missing" (its CRD is not installed) or "syncing" (its
    #: informer has not listed yet): then nothing was read or written for the slot
    kind_state: Literal["served", "missing", "syncing"] = "served"


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    what: str
    error: rclient.ApiError


def slot_condition(o: Observed, ctx: base.BuildContext) -> base.ChildCondition | None:
    """The condition a slot reports, typed by its slot (``CanaryDeploymentAvailable``...); None for
    a component that is not wanted (no canary) and a router child of a router not in use."""
    kind = o.slot.child.kind
    if not o.slot.target.component.present:
        return None
    if o.desired is not None and o.kind_state == "missing":
        cond = base.ChildCondition(
            "", "False", "CRDNotInstalled", f"{kind.group} {kind.kind} is not installed"
        )
    elif o.desired is not None and o.kind_state == "syncing":
        cond = base.ChildCondition("", "Unknown", "WaitingForCache", f"listing {kind.group} {kind.kind}")
    else:
        found = o.slot.child.condition(o.slot.target, ctx, o.desired, o.live)
        if found is None:
            return None
        cond = found
    return dataclasses.replace(cond, type=o.slot.condition_type)


def _replacing(cond: base.ChildCondition | None, o: Observed, previous: Obj) -> base.ChildCondition | None:
    """The predictor Deployment's condition, a replacement of lost replicas not called a rollout
    (:func:`deployment_rollout.replacing`; the rolled-out model is the previous status' ``activeVersion``)."""
    if (
        cond is None
        or o.slot.child is not deployment.CHILD
        or o.slot.target.component.key != labels.PREDICTOR
    ):
        return cond
    return deployment_rollout.replacing(cond, o.live, previous.get("activeVersion"))


#: what the API takes as a condition's reason (``isvc_status.Condition.reason``)
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")


def _reason(reason: str) -> str:
    """An API error's reason as a condition's: a Status from an admission webhook may carry any text
    there ("denied by policy"), and a status with it would be refused (422), so the failure never
    reported. Free text becomes ``ApiError`` (the text stays in the message)."""
    if len(reason) <= 1024 and _REASON.fullmatch(reason):
        return reason
    return "ApiError"


def merge_conditions(conds: Iterable[base.ChildCondition | None]) -> list[base.ChildCondition]:
    """One condition per type, in first-seen order; the worst status wins, True messages join."""
    by_type: dict[str, base.ChildCondition] = {}
    for c in conds:
        if c is None:
            continue
        prev = by_type.get(c.type)
        if prev is None or _SEVERITY[c.status] < _SEVERITY[prev.status]:
            by_type[c.type] = c
        elif c.status == prev.status == "True" and c.message and c.message != prev.message:
            by_type[c.type] = dataclasses.replace(prev, message=f"{prev.message}; {c.message}")
    return list(by_type.values())


#: the most bytes a status may take (JSON), whatever the children and upstream controllers say:
#: at most ~14 conditions of bounded messages, two traffic entries, a few scalars (docs/api.md)
STATUS_BUDGET_BYTES = 16 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Canary:
    """What the status needs of the canary: the rollout decided and the candidate pods' failure."""

    rollout: traffic.Rollout
    pod_failure: tuple[str, str] | None = None


def _serving(o: Observed) -> bool:
    """Whether a slot gates Ready: the serving children of the stable component and of the whole
    InferenceService; never the candidate's (a failing canary gets no traffic; CanaryReady says so)."""
    c = o.slot.child
    return c.serving and (not c.per_component or o.slot.target.component.key == labels.PREDICTOR)


def compute(
    isvc: internal.InferenceService,
    previous: Obj,
    observed: list[Observed],
    failures: list[Failure],
    pod_failure: tuple[str, str] | None,
    ctx: base.BuildContext,
    canary: Canary | None = None,
) -> Obj:
    """The whole ``status`` object (without ``lastReconcileTime``)."""
    slot_conds = merge_conditions(_replacing(slot_condition(o, ctx), o, previous) for o in observed)
    serving_types = {o.slot.condition_type for o in observed if _serving(o)}
    serving_conds = [c for c in slot_conds if c.type in serving_types]
    contrib = _predictor_contributions(observed, ctx)
    counts = contrib.replicas or base.Replicas(0, 0, 0)

    if failures:
        f = failures[0]
        ready = base.ChildCondition(
            "Ready", "False", "ReconcileFailed", f"{f.what}: {f.error.reason}: {f.error.message}"
        )
        reconciled = base.ChildCondition(
            "Reconciled",
            "False",
            _reason(f.error.reason),
            f"{f.what} failed: {f.error.status} {f.error.message}",
        )
    else:
        reconciled = base.ChildCondition(
            "Reconciled", "True", "ChildrenApplied", f"children match generation {isvc.generation}"
        )
        candidate_serves = canary is not None and any(
            sh.component == labels.CANARY and sh.percent > 0 and sh.ready > 0 for sh in canary.rollout.split
        )
        pred = canary.rollout.components[0] if canary is not None else base.predictor(isvc)
        ready = _ready(isvc, serving_conds, pod_failure, counts, candidate_serves, pred, ctx)
    extra = _canary_conditions(canary, slot_conds) if canary is not None and canary.rollout.involved else []
    # every message is bounded: the status stays small whatever an upstream controller says
    wanted = [
        dataclasses.replace(c, message=pod_problems.bounded(c.message))
        for c in (ready, reconciled, *slot_conds, *extra)
    ]
    out: Obj = {
        "observedGeneration": isvc.generation,
        "conditions": conditions.merge(previous.get("conditions") or [], wanted, generation=isvc.generation),
        "replicas": counts.replicas,
        "readyReplicas": counts.ready,
        "replicasSummary": f"{counts.ready}/{counts.desired}",
        "selector": labels.selector_string(isvc),
    }
    if ready.status == "True" and contrib.url:
        out["url"] = contrib.url
    if isvc.min_replicas > 0:
        version = contrib.rolled_out_model or previous.get("activeVersion")
        if version:
            out["activeVersion"] = version
    if canary is not None and canary.rollout.involved:
        out["traffic"] = [sh.status() for sh in canary.rollout.split]
    return out


CANARY_READY = "CanaryReady"
TRAFFIC_SPLIT_READY = "TrafficSplitReady"


def _describe(split: tuple[traffic.Share, ...]) -> str:
    return ", ".join(f"{sh.percent} % {sh.component} ({sh.ready} ready)" for sh in split)


def _canary_conditions(canary: Canary, slot_conds: list[base.ChildCondition]) -> list[base.ChildCondition]:
    """``CanaryReady`` (can the candidate take its share, and where the rollout stands) and, for
    the replicas router, ``TrafficSplitReady`` (the achieved share of ready endpoints)."""
    r = canary.rollout
    plan, phase = r.plan, r.plan.phase
    effective = f"effective split: {_describe(r.split)}"
    deployment_cond = next((c for c in slot_conds if c.type == "CanaryDeploymentAvailable"), None)
    Phase = canary_plan.Phase
    if canary.pod_failure is not None and phase in (Phase.STAGING, Phase.STAGED, Phase.CANARY):
        reason, message = canary.pod_failure
        cond = base.ChildCondition(CANARY_READY, "False", reason, f"{message}: the candidate gets no traffic")
    elif phase is Phase.STAGING and deployment_cond is not None and deployment_cond.status == "False":
        cond = base.ChildCondition(
            CANARY_READY,
            "False",
            deployment_cond.reason,
            f"{deployment_cond.message}: the candidate gets no traffic",
        )
    elif phase is Phase.STABLE:
        t = r.canary.model_uri
        cond = base.ChildCondition(
            CANARY_READY,
            "True",
            "NoCandidate",
            f"spec.canary.model.uri is spec.predictor.model.uri{': ' + t if t else ''}: no canary runs",
        )
    else:
        ok: base.Status = "False" if phase in (Phase.STAGING, Phase.ROLLING_BACK) else "True"
        cond = base.ChildCondition(CANARY_READY, ok, phase.value, f"{plan.message}; {effective}")
    out = [cond]
    if r.route.router is base.Router.REPLICAS and r.canary.present:
        shares = {sh.component: sh for sh in r.split}
        cand = shares.get(labels.CANARY)
        stable = shares[labels.PREDICTOR]
        if cand is not None and cand.percent > 0:
            total = cand.ready + stable.ready
            asked = plan.canary_weight
            message = (
                f"replicas router: candidate {cand.ready} of {total} ready endpoints = {cand.percent} % "
                f"(asked {asked} %)"
            )
        else:
            message = (
                f"replicas router: 100 % to the predictor ({stable.ready} ready endpoints), "
                "candidate not selected"
            )
        out.append(base.ChildCondition(TRAFFIC_SPLIT_READY, "True", "EndpointsSelected", message))
    return out


def _ready(
    isvc: internal.InferenceService,
    serving: list[base.ChildCondition],
    pod_failure: tuple[str, str] | None,
    counts: base.Replicas,
    candidate_serves: bool = False,
    predictor: base.Component | None = None,
    ctx: base.BuildContext | None = None,
) -> base.ChildCondition:
    summary = f"{counts.ready}/{counts.desired} replicas ready"
    failing = next((c for c in serving if c.status == "False"), None)
    keda = predictor is not None and base.replica_owner(predictor) is base.ReplicaOwner.KEDA
    if isvc.min_replicas == 0 and not keda:
        return base.ChildCondition(
            "Ready", "False", "ScaledToZero", "minReplicas is 0: no replica is running"
        )
    if keda and counts.desired == 0 and predictor is not None:
        target = base.Target(isvc, predictor)
        why = scaledobject.wakes(target, ctx or base.BuildContext())
        return base.ChildCondition("Ready", "False", "ScaledToZero", f"scaled to zero: {why}")
    if counts.ready == 0 and candidate_serves:
        why = pod_failure[1] if pod_failure else failing.message if failing else summary
        return base.ChildCondition(
            "Ready",
            "True",
            "ServingCandidate",
            f"the stable component cannot serve ({why}): the candidate serves every request",
        )
    if pod_failure is not None and (
        pod_failure[0] not in pod_problems.POD_PENDING_REASONS or counts.ready == 0
    ):
        return base.ChildCondition("Ready", "False", pod_failure[0], pod_failure[1])
    if failing is not None:
        return base.ChildCondition("Ready", "False", failing.reason, failing.message)
    if counts.ready >= 1 and all(c.status == "True" for c in serving):
        return base.ChildCondition("Ready", "True", "Serving", summary)
    return base.ChildCondition("Ready", "False", "Waiting", summary)


def _predictor_contributions(observed: list[Observed], ctx: base.BuildContext) -> base.Contribution:
    replicas: base.Replicas | None = None
    url = model = None
    for o in observed:
        contribute = o.slot.child.contribute
        if contribute is None or o.slot.target.component.key != labels.PREDICTOR or o.desired is None:
            continue
        c = contribute(o.slot.target, ctx, o.live)
        replicas = c.replicas or replicas
        url = c.url or url
        model = c.rolled_out_model or model
    return base.Contribution(replicas, url, model)


def invalid(raw: Obj, message: str) -> Obj:
    """The status of an object whose spec cannot be used: Ready and Reconciled False/InvalidSpec."""
    generation = objects.generation(raw)
    previous = raw.get("status") or {}
    wanted = [
        base.ChildCondition("Ready", "False", "InvalidSpec", pod_problems.bounded(message)),
        base.ChildCondition("Reconciled", "False", "InvalidSpec", pod_problems.bounded(message)),
    ]
    return {
        **{k: v for k, v in previous.items() if k not in ("conditions", "lastReconcileTime", "url")},
        "observedGeneration": generation,
        "conditions": conditions.merge(previous.get("conditions") or [], wanted, generation=generation),
    }
