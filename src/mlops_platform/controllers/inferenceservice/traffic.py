"""The canary rollout of one reconcile, from the live objects (pure: the objects come in, no I/O):
:func:`decide` reads through callables what the reconciler has in its cache (``mlops-platform why``:
what the API shows), :func:`rollout` reads each component's :class:`~.canary_plan.Backend` from its
Deployment or pods (:func:`backend`, :func:`pods_backend`), asks the state machine
(:mod:`~mlops_platform.controllers.inferenceservice.canary_plan`: phases and guards) for the plan,
chooses the router (:func:`choose_router`), and returns a :class:`Rollout`: the plan, the
components to keep (predictor, canary) with their replica bounds, the route to write, and the split
the live route serves now (:class:`Share`, ``status.traffic``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import canary_plan, labels
from mlops_platform.controllers.inferenceservice.children import (
    base,
    deployment_rollout,
    httproute,
    scaledobject,
    virtualservice,
)
from mlops_platform.controllers.inferenceservice.children import deployment as children_deployment
from mlops_platform.controllers.inferenceservice.children import model_mount as children_model_mount
from mlops_platform.controllers.inferenceservice.children import service as children_service
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.objects import Obj


@dataclasses.dataclass(frozen=True, slots=True)
class Share:
    """One backend of the effective split (``status.traffic``)."""

    component: str
    model_uri: str
    percent: int
    ready: int
    version: str | None

    def status(self) -> dict[str, object]:
        out: dict[str, object] = {
            "component": self.component,
            "modelUri": self.model_uri,
            "percent": self.percent,
            "readyReplicas": self.ready,
        }
        if self.version:
            out["version"] = self.version
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Rollout:
    """Everything one reconcile decides about the canary, from the CR and the live objects."""

    plan: canary_plan.Plan
    #: the predictor, then the canary (``present`` False when no canary component is wanted)
    components: tuple[base.Component, ...]
    route: base.Route
    #: what the live route does now (not what it is being asked to do)
    split: tuple[Share, ...]
    #: the candidate's weight on the live route (the replicas router: its share of ready endpoints
    #: while the predictor Service selects it, else 0)
    live_canary: int = 0
    #: the router has applied the live route's current generation
    applied: bool = True

    @property
    def canary(self) -> base.Component:
        return self.components[1]

    @property
    def involved(self) -> bool:
        """Whether a canary is asked for or still around (then CanaryReady and status.traffic)."""
        return self.canary.present or self.plan.phase is not canary_plan.Phase.STABLE


def choose_router(
    isvc: internal.InferenceService, ctx: base.BuildContext, served: set[base.Router]
) -> base.Router:
    """The router of ``isvc``: its own setting, else the operator's; ``auto`` is Istio when its
    VirtualService CRD is served, else the Gateway API when the HTTPRoute CRD is served and a parent
    Gateway is configured, else the replicas router. An explicit router whose CRD is missing stays
    chosen (the route slot then reports CRDNotInstalled; traffic keeps going to the predictor)."""
    chosen = base.Router(isvc.router) if isvc.router else ctx.router
    if chosen is not base.Router.AUTO:
        return chosen
    if base.Router.ISTIO in served:
        return base.Router.ISTIO
    if base.Router.GATEWAY_API in served and ctx.gateway:
        return base.Router.GATEWAY_API
    return base.Router.REPLICAS


def backend(deployment: Obj | None) -> canary_plan.Backend:
    """What a live component Deployment shows (:class:`canary_plan.Backend`): the model all its pods run
    (:func:`~.children.deployment_rollout.serving_model`: a scale-up keeps it, a model rollout clears it
    until no old pod is left) and its available replicas."""
    if deployment is None:
        return canary_plan.Backend()
    ready = int((deployment.get("status") or {}).get("availableReplicas") or 0)
    return canary_plan.Backend(True, deployment_rollout.serving_model(deployment), ready)


def pod_ready(pod: Obj) -> bool:
    """A pod counts when its Ready condition is True and it is not terminating."""
    if objects.deleting(pod):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def pod_model(pod: Obj) -> str | None:
    """The model a pod was started with (its template's model annotation)."""
    value = (objects.meta(pod).get("annotations") or {}).get(labels.MODEL_URI_ANNOTATION)
    return str(value) if value else None


def pods_backend(exists: bool, pods: Iterable[Obj]) -> canary_plan.Backend:
    """A component as its pods show it: the model its ready pods run when they all run the same
    one (None while a model rollout leaves pods of two models ready), and how many are ready. Exact
    where the Deployment's status lags: a scale-up bumps the Deployment's generation, so until its
    controller observes it the Deployment cannot say the pods still run the candidate."""
    ready = [p for p in pods if pod_ready(p)]
    models = {pod_model(p) for p in ready}
    model = next(iter(models)) if len(models) == 1 else None
    return canary_plan.Backend(exists, model, len(ready) if model is not None else 0)


def _live_model(deployment: Obj | None) -> str | None:
    annotations = objects.meta(deployment or {}).get("annotations") or {}
    value = annotations.get(labels.MODEL_URI_ANNOTATION)
    return str(value) if value else None


def _live_replicas(deployment: Obj | None) -> int | None:
    value = ((deployment or {}).get("spec") or {}).get("replicas")
    return None if value is None else int(value)


def _share(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole > 0 else 0


def version_of(model_uri: str) -> str:
    """The last path segment of a model URI (``gs://models/bert/7`` -> ``7``)."""
    return model_uri.rstrip("/").rsplit("/", 1)[-1]


def rollout(
    isvc: internal.InferenceService,
    ctx: base.BuildContext,
    router: base.Router,
    stable_live: Obj | None,
    canary_live: Obj | None,
    route_live: Obj | None,
    live_weights: dict[str, int] | None,
    canary_endpoints: int,
    canary_pods: Iterable[Obj] = (),
    keda: bool = False,
    route_applied: bool = True,
) -> Rollout:
    """The decision of one reconcile. ``route_live`` is the live route object (the predictor Service
    for the replicas router) and ``live_weights`` what it gives each component (None: no route);
    ``canary_endpoints`` the ready endpoints of the canary Service: the candidate counts as ready
    only once its Service has them too (what a mesh or gateway routes to), not just when the
    Deployment says its replicas are available. The candidate's model is read from its ready pods
    (:func:`pods_backend`), so scaling it (a new percent) never takes it out of the route."""
    stable_key, canary_key = canary_plan.STABLE_KEY, canary_plan.CANARY_KEY
    stable = backend(stable_live)
    canary = pods_backend(canary_live is not None, canary_pods)
    canary = dataclasses.replace(canary, ready=min(canary.ready, canary_endpoints))
    if router is base.Router.REPLICAS:
        chosen = children_service.selected(route_live)
        live: dict[str, int] = {}
        if chosen == {canary_key}:
            live = {canary_key: 100}
        elif canary_key in chosen:  # both selected (the stable key marks it; shares by ready endpoints)
            whole = stable.ready + canary.ready
            live = {stable_key: 0, canary_key: max(1, _share(canary.ready, whole)) if whole else 1}
    else:
        live = dict(live_weights or {})
    p = canary_plan.plan(isvc, stable, canary, live.get(canary_key), route_applied)
    pred = base.predictor(isvc, keda=keda)
    if ctx.activator and base.replica_owner(pred) is base.ReplicaOwner.KEDA and stable.ready == 0:
        pred = dataclasses.replace(pred, parked=True)
    if p.canary is canary_plan.CanaryAction.DELETE:
        cand = base.Component(canary_key, "", "Canary", 0, 0, present=False)
    else:
        uri = p.canary_uri if p.canary is canary_plan.CanaryAction.BUILD else _live_model(canary_live)
        uri = uri or isvc.model_uri
        lo, hi = _canary_bounds(isvc, router, stable_live, canary_live)
        sha256, model_format, storage = _candidate_artifact(isvc, uri, canary_live)
        cand = base.Component(
            canary_key,
            uri,
            "Canary",
            lo,
            hi,
            model_sha256=sha256,
            model_format=model_format,
            storage=storage,
        )
    route = base.Route(router, {k: w for k, w in p.weights.items() if w > 0})
    split = _effective(isvc, router, stable, canary, live, pred, cand)
    return Rollout(p, (pred, cand), route, split, live.get(canary_key, 0), route_applied)


def _candidate_artifact(
    isvc: internal.InferenceService, uri: str, canary_live: Obj | None
) -> tuple[str | None, str | None, internal.ModelStorage]:
    """The checksum, format and storage the canary component fetches ``uri`` with: the candidate's
    own (``spec.canary.model``, its storage defaulting to the predictor's) while it is the one asked
    for; else, for a canary that stays as it is (promoting, leaving), what its live Deployment
    fetches, so the model it serves is not rolled out again while it may carry traffic; else the
    predictor's (the model is the predictor's)."""
    t = isvc.traffic
    if t is not None and uri == t.model_uri:
        return t.model_sha256, t.model_format, t.storage
    if canary_live is not None and uri == _live_model(canary_live):
        return children_model_mount.fetch_options(canary_live)
    if uri == isvc.model_uri:
        return isvc.model_sha256, isvc.model_format, isvc.storage
    return None, None, isvc.storage


def _canary_bounds(
    isvc: internal.InferenceService, router: base.Router, stable_live: Obj | None, canary_live: Obj | None
) -> tuple[int, int]:
    """The canary's replica bounds (min, max; equal = fixed count) — the documented rule:

    - scaled to zero (``minReplicas`` 0): 0, the canary too;
    - no percent asked (a promotion or rollback under way): the live count is kept (never scaled
      down while it may carry traffic);
    - replicas router: the count whose share of ready endpoints is closest to ``canaryPercent``
      next to the stable Deployment's current count (:func:`canary_plan.endpoint_split`), 1 when staged; no
      canary HPA (an autoscaler would move the share);
    - weighted routers: ``ceil(minReplicas * p / 100)`` (at least 1) and, when the stable component
      is autoscaled, an HPA from there up to ``maxReplicas`` (its share of the load sizes it).
    """
    if isvc.min_replicas == 0:
        return 0, 0
    t = isvc.traffic
    percent = t.percent if t is not None and t.model_uri not in (None, isvc.model_uri) else None
    if percent is None:
        count = _live_replicas(canary_live) or 1
        return count, count
    if router is base.Router.REPLICAS:
        s = _live_replicas(stable_live) or isvc.min_replicas
        count = canary_plan.endpoint_split(percent, s, isvc.max_replicas).canary_replicas
        return count, count
    lo = max(1, min(isvc.min_replicas, math.ceil(isvc.min_replicas * percent / 100)))
    hpa = base.replica_owner(base.predictor(isvc)) is base.ReplicaOwner.HPA
    return lo, (isvc.max_replicas if hpa else lo)


def _effective(
    isvc: internal.InferenceService,
    router: base.Router,
    stable: canary_plan.Backend,
    canary: canary_plan.Backend,
    live: dict[str, int],
    pred: base.Component,
    cand: base.Component,
) -> tuple[Share, ...]:
    """What the live route does now: the replicas router's share of ready endpoints, else the live
    weights (no route object: everything goes to the predictor Service)."""
    if router is base.Router.REPLICAS and live.get(canary_plan.CANARY_KEY) and canary_plan.STABLE_KEY in live:
        # both components selected: each gets its share of the ready endpoints
        whole = stable.ready + canary.ready
        c_pct = _share(canary.ready, whole)
        s_pct = 100 - c_pct if whole else 0
    elif live:
        c_pct, s_pct = live.get(canary_plan.CANARY_KEY, 0), live.get(canary_plan.STABLE_KEY, 0)
    else:  # no route object, or the predictor Service selects only the predictor
        c_pct, s_pct = 0, 100
    stable_uri = stable.model_uri or pred.model_uri
    out = [Share(canary_plan.STABLE_KEY, stable_uri, s_pct, stable.ready, version_of(stable_uri))]
    if cand.present:
        t = isvc.traffic
        token = t.version if t is not None and t.model_uri == cand.model_uri and t.version else None
        version = token if token and "://" not in token else version_of(cand.model_uri)
        out.append(Share(canary_plan.CANARY_KEY, cand.model_uri, c_pct, canary.ready, version))
    return tuple(out)


#: the route object of each weighted router
ROUTES = {base.Router.ISTIO: virtualservice, base.Router.GATEWAY_API: httproute}


def decide(
    isvc: internal.InferenceService,
    ctx: base.BuildContext,
    served: Callable[[kinds.Kind], bool],
    live: Callable[[kinds.Kind, str], Obj | None],
    canary_endpoints: Callable[[], int],
    pods: Callable[[], Iterable[Obj]],
) -> Rollout:
    """The canary decision of one reconcile from what a reader shows: whether an optional kind is
    served (``served``), a live object by kind and name (``live``), the canary Service's ready
    endpoints and the InferenceService's pods (read only while a canary Deployment exists). The
    reconciler reads its cache (or the answers of its writes); ``mlops-platform why`` the API."""
    router = choose_router(isvc, ctx, {r for r, m in ROUTES.items() if served(m.KIND)})
    keda = served(scaledobject.KIND)
    stable = live(children_deployment.KIND, base.component_name_of(isvc, labels.PREDICTOR))
    canary = live(children_deployment.KIND, base.component_name_of(isvc, labels.CANARY))
    endpoints = canary_endpoints() if canary else 0
    canary_pods = (
        [p for p in pods() if objects.labels(p).get(labels.COMPONENT) == labels.CANARY] if canary else []
    )
    weights: dict[str, int] | None = None
    applied = True
    if router is base.Router.REPLICAS:
        route = live(children_service.KIND, base.component_name_of(isvc, labels.PREDICTOR))
    else:
        module = ROUTES[router]
        route = live(module.KIND, isvc.name) if served(module.KIND) else None
        weights = module.live_weights(route)
        applied = module.applied(route, ctx)
    return rollout(isvc, ctx, router, stable, canary, route, weights, endpoints, canary_pods, keda, applied)
