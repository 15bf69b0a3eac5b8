"""The Gateway API HTTPRoute ``<name>`` (``gateway.networking.k8s.io``, optional kind): the ingress entry
of an InferenceService on the operator's Gateway, and its canary split.

Contract of :func:`build` (pure): desired while the Gateway API router is in use
(``target.route.router is Router.GATEWAY_API``) and a parent Gateway is configured
(``ctx.gateway``, ``namespace/name``): for the whole life of the InferenceService, canary or not.
It attaches to that Gateway (``parentRefs``), answers ``<name>.<namespace>.<ingress domain>``
(:func:`hostname`) and has one rule (every path) whose ``backendRefs`` are one per entry of
``target.route.weights``, in component order (the predictor first): that component's Service on
the InferenceService port, weighted by its percent. Fields the API server defaults (groups, kinds,
the match) are written out, so the live object holds what was built.

``TrafficSplitReady`` (not gating ``Ready``): no condition when not desired; Unknown ``Pending``
while the route is missing or carries other weights; False with the Gateway's reason when our
parent Gateway did not accept it (a verdict on an older generation of the route does not count);
True ``WeightsApplied`` once the live weights are the desired ones, also before any Gateway
controller reports on the route (none may run; the message says so).
:func:`contribute` gives the InferenceService its ingress :func:`url`; :func:`live_weights` reads
a live HTTPRoute's weights back per component key, :func:`applied` whether the Gateway has taken in
the route's current generation (a leaving canary's Service goes only then).
"""

from __future__ import annotations

from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import kinds

CONDITION = "TrafficSplitReady"
GROUP = "gateway.networking.k8s.io"
# sigs.k8s.io/gateway-api (standard channel) serves v1 and v1beta1 with the same schema; v1 is stored
KIND = kinds.Kind(GROUP, "HTTPRoute", "httproutes", ("v1", "v1beta1"), optional=True)
GATEWAY_KIND = "Gateway"
ACCEPTED = "Accepted"
#: the one rule matches every path (the API server's default, written out)
MATCH_ALL_PREFIX = "/"

name = base.service_name


def parent(target: base.Target, ctx: base.BuildContext) -> tuple[str, str] | None:
    """``(namespace, name)`` of the parent Gateway (a bare ``--gateway`` name is in the
    InferenceService's namespace); None without one."""
    return _gateway_in(ctx, target.isvc.namespace)


def _gateway_in(ctx: base.BuildContext, namespace: str) -> tuple[str, str] | None:
    """``ctx.gateway`` as ``(namespace, name)``, a bare name in ``namespace``; None without one."""
    if not ctx.gateway:
        return None
    ns, _, gw = ctx.gateway.rpartition("/")
    return (ns or namespace, gw)


def enabled(target: base.Target, ctx: base.BuildContext) -> bool:
    """Whether the route is desired: the Gateway API router with a parent Gateway."""
    return target.route.router is base.Router.GATEWAY_API and parent(target, ctx) is not None


def hostname(target: base.Target, ctx: base.BuildContext) -> str:
    """``<name>.<namespace>.<ingress domain>``."""
    return f"{target.isvc.name}.{target.isvc.namespace}.{ctx.ingress_domain}"


def url(target: base.Target, ctx: base.BuildContext) -> str:
    """``http://<hostname>``."""
    return f"http://{hostname(target, ctx)}"


def build(target: base.Target, ctx: base.BuildContext) -> base.Obj | None:
    gateway = parent(target, ctx)
    if target.route.router is not base.Router.GATEWAY_API or gateway is None:
        return None
    isvc = target.isvc
    backends: list[base.Obj] = [
        {
            "group": "",
            "kind": "Service",
            "name": base.component_name_of(isvc, key),
            "port": isvc.port,
            "weight": weight,
        }
        for key, weight in target.ordered_weights()
    ]
    return {
        "apiVersion": KIND.resource().api_version,
        "kind": KIND.kind,
        "metadata": base.metadata(target, ctx, name(target), per_component=False),
        "spec": {
            "parentRefs": [
                {"group": GROUP, "kind": GATEWAY_KIND, "namespace": gateway[0], "name": gateway[1]}
            ],
            "hostnames": [hostname(target, ctx)],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": MATCH_ALL_PREFIX}}],
                    "backendRefs": backends,
                }
            ],
        },
    }


def live_weights(live: base.Obj | None) -> dict[str, int] | None:
    """The weight of each component key in an HTTPRoute's first rule (a missing weight is the API's
    default, 1); None without an object. A backend that is no Service ``<name>-<key>`` of this
    InferenceService's namespace is kept under ``Kind/namespace/name`` (so it never compares
    equal to a desired split)."""
    if live is None:
        return None
    isvc_name, namespace = objects.name(live), objects.namespace(live)
    rules = (live.get("spec") or {}).get("rules") or []
    backends = (rules[0].get("backendRefs") if rules else None) or []
    prefix = f"{isvc_name}-"
    out: dict[str, int] = {}
    for b in backends:
        ref = str(b.get("name") or "")
        group, kind = b.get("group") or "", b.get("kind") or "Service"
        ns = b.get("namespace") or namespace
        ours = group == "" and kind == "Service" and ns == namespace
        key = ref[len(prefix) :] if ours and ref.startswith(prefix) and ref != prefix else None
        key = key or f"{kind}/{ns}/{ref}"
        weight = b.get("weight")
        out[key] = out.get(key, 0) + (1 if weight is None else int(weight))
    return out


def applied(live: base.Obj | None, ctx: base.BuildContext) -> bool:
    """Whether the Gateway's controller has taken in the live route as it is now: one of its parent
    statuses for our Gateway says ``Accepted`` of the route's current generation. Until then the
    Gateway may still route by an older generation, and a backend it still weights whose Service is
    gone answers 500 (the Gateway API's rule for an invalid backend; Traefik does): a candidate that
    is leaving stays until then. True without a route, without a Gateway, or while no controller
    has ever reported on the route for our Gateway (none runs: nothing routes by it)."""
    gateway = _gateway_in(ctx, objects.namespace(live) or "") if live is not None else None
    if live is None or gateway is None:
        return True
    parents = _parent_statuses(live, gateway)
    reported = [c for p in parents for c in p.get("conditions") or () if c.get("type") == ACCEPTED]
    generation = objects.generation(live)
    # a condition without observedGeneration (it is optional) speaks of the route as it is
    return not reported or any(int(c.get("observedGeneration") or generation) >= generation for c in reported)


def _parent_statuses(live: base.Obj, gateway: tuple[str, str]) -> list[base.Obj]:
    """The ``status.parents`` entries about our parent Gateway (one per Gateway controller)."""
    out = []
    for p in (live.get("status") or {}).get("parents") or []:
        ref = p.get("parentRef") or {}
        if (
            (ref.get("group") or GROUP) == GROUP
            and (ref.get("kind") or GATEWAY_KIND) == GATEWAY_KIND
            and (ref.get("namespace") or objects.namespace(live)) == gateway[0]
            and ref.get("name") == gateway[1]
        ):
            out.append(p)
    return out


def condition(
    target: base.Target, ctx: base.BuildContext, desired: base.Obj | None, live: base.Obj | None
) -> base.ChildCondition | None:
    gateway = parent(target, ctx)
    if desired is None or gateway is None:
        return None
    if live is None:
        return base.not_found(CONDITION, KIND, name(target))
    where = f"Gateway {gateway[0]}/{gateway[1]}"
    # a parent status holds its conditions itself (not under status.conditions); a verdict on an
    # older generation of the route is not one on this route
    generation = objects.generation(live)
    accepted = [
        c
        for p in _parent_statuses(live, gateway)
        for c in p.get("conditions") or ()
        if c.get("type") == ACCEPTED and int(c.get("observedGeneration") or generation) >= generation
    ]
    for c in accepted:
        if c.get("status") == "False":
            why = f"{KIND.kind} {name(target)} not accepted by {where}: {c.get('message') or 'no message'}"
            return base.ChildCondition(CONDITION, "False", c.get("reason") or "NotAccepted", why)
    have, want = live_weights(live), live_weights(desired)
    shown, wanted = base.describe_weights(have or {}), base.describe_weights(want or {})
    if have != want:
        return base.ChildCondition(
            CONDITION,
            "Unknown",
            "Pending",
            f"{KIND.kind} {name(target)}: {shown}, want {wanted}",
        )
    ok = any(c.get("status") == "True" for c in accepted)
    said = f"accepted by {where}" if ok else f"not yet accepted by {where}"
    return base.ChildCondition(
        CONDITION,
        "True",
        "WeightsApplied",
        f"{KIND.kind} {name(target)}: {shown}; {said}",
    )


def contribute(target: base.Target, ctx: base.BuildContext, live: base.Obj | None) -> base.Contribution:
    """The ingress URL, while the route is desired."""
    return base.Contribution(url=url(target, ctx) if enabled(target, ctx) else None)


RBAC = base.child_rbac(
    KIND,
    why="the HTTPRoute of an InferenceService on the Gateway: watched (owns, while its CRD exists), "
    "applied, repaired, deleted",
)
CHILD = base.Child(
    "httproute",
    KIND,
    CONDITION,
    name,
    build,
    condition,
    contribute=contribute,
    serving=False,
    per_component=False,
)
