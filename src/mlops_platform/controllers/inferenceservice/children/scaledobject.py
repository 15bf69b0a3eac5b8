"""The KEDA ScaledObject (``keda.sh/v1alpha1``) ``<name>-predictor``: autoscaling from zero.

Contract of :func:`build` (pure): desired only when KEDA owns the replica count
(:func:`base.replica_owner`: ``minReplicas: 0``, ``maxReplicas >= 1`` and KEDA's ScaledObject CRD
served); otherwise ``None``, so a stale one is deleted — never both a ScaledObject and an HPA (KEDA's
admission refuses a ScaledObject whose target already has an HPA; the reconciler deletes before it
creates). It scales the component's Deployment between 0 and ``maxReplicas`` on one Prometheus
trigger (:func:`query`): the model server's own request rate, or, when the server has no series
(at zero replicas there is no pod to export one), the mesh's count of requests to the predictor
Service (``istio_requests_total``, recorded by the calling proxy), so a request wakes it. A runtime
whose metrics dialect is ``none`` (the runtime table) has no server series the operator knows: its
trigger is the mesh's count alone, and the condition says so. One replica per
``requests_per_replica`` requests per second (the InferenceService's scale-to-zero policy, else
``--keda-requests-per-replica``); any request activates; ``cooldownPeriod`` is the policy's
``cooldown_seconds``, else :data:`COOLDOWN_SECONDS`, and so is ``initialCooldownPeriod`` (a new
ScaledObject does not take a serving Deployment to zero before Prometheus has seen its traffic).
``AutoscalerReady`` follows the ScaledObject's ``Ready`` condition (KEDA's operator writes it);
none is reported when no ScaledObject is wanted (the HPA child reports then).
"""

from __future__ import annotations

import math

from mlops_platform.activator import contract
from mlops_platform.controllers.inferenceservice import alert_queries, alert_settings, alerts
from mlops_platform.controllers.inferenceservice.children import base, deployment
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import kinds

GROUP = "keda.sh"
KIND = kinds.Kind(GROUP, "ScaledObject", "scaledobjects", ("v1alpha1",), optional=True)
CONDITION = "AutoscalerReady"
#: seconds without activity before KEDA scales back to zero (KEDA's default), unless the
#: InferenceService's scale-to-zero policy says otherwise
COOLDOWN_SECONDS = 300

name = base.component_name


def server_metrics(target: base.Target, ctx: base.BuildContext) -> bool:
    """Whether the runtime exports request metrics the operator knows (its dialect is not ``none``)."""
    return ctx.server(target.isvc).metrics_dialect != alert_queries.NO_REQUEST_METRICS


def query(target: base.Target, ctx: base.BuildContext) -> str:
    """The trigger's PromQL: requests per second to this component (see the module doc)."""
    isvc = target.isvc
    service = base.component_name(target)
    mesh = (
        f'sum(rate(istio_requests_total{{destination_service_namespace="{isvc.namespace}", '
        f'destination_service_name="{service}"}}[1m]))'
    )
    if not server_metrics(target, ctx):
        return mesh
    dialect = alert_queries.SERVERS[ctx.server(isvc).metrics_dialect]
    server = dialect.requests(alerts.request_query(isvc.namespace, isvc.name, trigger_window(ctx)))
    return f"({server}) or {mesh}"


def trigger_window(ctx: base.BuildContext) -> str:
    """The server rate's window: one minute, or two scrapes when ``--scrape-interval`` is longer
    than 30 s (a rate needs two samples in its window; fewer, and the trigger never fires)."""
    seconds = max(60, math.ceil(2 * alert_settings.parse_duration(ctx.scrape_interval)))
    return "1m" if seconds == 60 else f"{seconds}s"


def requests_per_replica(target: base.Target, ctx: base.BuildContext) -> float:
    """The trigger's threshold: the InferenceService's, else the operator's."""
    own = target.isvc.autoscaling.requests_per_replica
    return ctx.keda_requests_per_replica if own is None else own


def cooldown_seconds(target: base.Target) -> int:
    """Seconds without activity before KEDA scales back to zero: the InferenceService's, else KEDA's."""
    own = target.isvc.autoscaling.cooldown_seconds
    return COOLDOWN_SECONDS if own is None else own


def _mesh_only(target: base.Target, ctx: base.BuildContext) -> str:
    if server_metrics(target, ctx):
        return ""
    return (
        f"; the trigger is the mesh's request count alone (istio_requests_total): runtime "
        f"{target.isvc.framework!r} has metricsDialect {alert_queries.NO_REQUEST_METRICS}, so without a mesh "
        "KEDA sees no request"
    )


def wakes(target: base.Target, ctx: base.BuildContext) -> str:
    """What wakes a component scaled to zero (said on ``Ready=False/ScaledToZero``), truthfully: the
    activator, which holds a request and counts it for KEDA; without one, at zero replicas no model
    server exports a request count, so only a mesh proxy in front of it counts the requests."""
    if ctx.activator:
        return (
            f"a request to it is held by the activator {ctx.activator}, and KEDA ScaledObject "
            f"{name(target)} wakes it on the held count (then one replica per "
            f"{requests_per_replica(target, ctx):g} requests/s from Prometheus at {ctx.keda_prometheus_url})"
        )
    return (
        f"KEDA ScaledObject {name(target)} wakes it once Prometheus at {ctx.keda_prometheus_url} counts "
        f"requests to it (then one replica per {requests_per_replica(target, ctx):g} requests/s); at zero "
        "replicas only a mesh proxy in front of it counts them (istio_requests_total): without a mesh a "
        f"request fails and wakes nothing (kubectl scale deployment {name(target)} --replicas=1 wakes it)"
        f"{_mesh_only(target, ctx)}"
    )


def build(target: base.Target, ctx: base.BuildContext) -> base.Obj | None:
    component = target.component
    if base.replica_owner(component) is not base.ReplicaOwner.KEDA:
        return None
    return {
        "apiVersion": KIND.resource().api_version,
        "kind": KIND.kind,
        "metadata": base.metadata(target, ctx, name(target)),
        "spec": {
            "scaleTargetRef": deployment.scale_target_ref(target),
            "minReplicaCount": 0,
            "maxReplicaCount": component.max_replicas,
            "cooldownPeriod": cooldown_seconds(target),
            # a new ScaledObject (a service switched to minReplicas 0 while it serves) is not taken
            # to zero before one cooldown: KEDA's default is at once when its first poll sees no
            # request rate, and Prometheus may not have scraped the pods yet (seen live)
            "initialCooldownPeriod": cooldown_seconds(target),
            "triggers": triggers(target, ctx),
            **({"pollingInterval": ACTIVATOR_POLLING_SECONDS} if ctx.activator else {}),
        },
    }


#: how often KEDA asks the activator (and Prometheus) while an activator is configured: a held
#: request waits at most this long before KEDA scales its model up (KEDA's default is 30 s)
ACTIVATOR_POLLING_SECONDS = 2


def triggers(target: base.Target, ctx: base.BuildContext) -> list[base.Obj]:
    """The server's request rate from Prometheus; with an activator, also its held requests."""
    rate = {
        "type": "prometheus",
        "metadata": {
            "serverAddress": ctx.keda_prometheus_url,
            "query": query(target, ctx),
            "threshold": f"{requests_per_replica(target, ctx):g}",
            "activationThreshold": "0",
        },
    }
    if not ctx.activator:
        return [rate]
    held = {
        "type": "metrics-api",
        "metadata": {
            "url": contract.held_url(ctx.activator, target.isvc.namespace, name(target)),
            "valueLocation": "held",
            "targetValue": f"{requests_per_replica(target, ctx):g}",
            "activationTargetValue": "0",
        },
    }
    return [rate, held]


def condition(
    target: base.Target, ctx: base.BuildContext, desired: base.Obj | None, live: base.Obj | None
) -> base.ChildCondition | None:
    if desired is None:
        return None
    if live is None:
        return base.not_found(CONDITION, KIND, name(target))
    ready = objects.condition(live, "Ready")
    if ready is None or ready.get("status") == "Unknown":
        msg = f"ScaledObject {name(target)}: the KEDA operator has not evaluated it yet"
        return base.ChildCondition(CONDITION, "Unknown", "Pending", msg)
    if ready.get("status") == "False":
        return base.ChildCondition(
            CONDITION, "False", ready.get("reason") or "ScaledObjectNotReady", ready.get("message", "")
        )
    active = objects.condition(live, "Active") or {}
    state = "active" if active.get("status") == "True" else "idle (scaled to zero)"
    return base.ChildCondition(
        CONDITION,
        "True",
        "ScaledObjectReady",
        f"ScaledObject {name(target)}: {state}{_mesh_only(target, ctx)}",
    )


RBAC = base.child_rbac(KIND, why="the KEDA ScaledObject (scale from zero): watched, applied, deleted")
# like the HPA, its health is reported but does not stop a service serving
CHILD = base.Child("scaledobject", KIND, CONDITION, name, build, condition, serving=False)
