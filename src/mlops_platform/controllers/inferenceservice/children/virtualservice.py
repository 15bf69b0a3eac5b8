"""The Istio VirtualService ``<name>`` (``networking.istio.io``, optional kind): the mesh's canary split.

Contract of :func:`build` (pure): desired only while the Istio router is in use
(``target.route.router is Router.ISTIO``) *and* a canary component exists; without a canary, mesh
traffic to ``<name>-predictor`` needs no VirtualService (the reconciler deletes a stale one). Its
``hosts`` is the predictor Service's FQDN (``<name>-predictor.<namespace>.svc.<cluster domain>``):
clients keep calling the predictor Service and the mesh splits. One ``http`` route (``split``) holds
one destination per entry of ``target.route.weights``, in component order (the predictor first):
that component's Service FQDN on the InferenceService port, weighted by its percent.

``TrafficSplitReady`` (not gating ``Ready``): no condition when not desired; Unknown ``Pending``
until the live route carries the desired weights, then True ``WeightsApplied``.
:func:`live_weights` reads a live VirtualService's weights back per component key (what the live
route gives the canary), :func:`applied` whether the mesh reported taking in its current generation.
"""

from __future__ import annotations

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import kinds

CONDITION = "TrafficSplitReady"
GROUP = "networking.istio.io"
# istio.io/api serves v1, v1beta1 and v1alpha3 with the same schema; v1 is the storage version
KIND = kinds.Kind(GROUP, "VirtualService", "virtualservices", ("v1", "v1beta1", "v1alpha3"), optional=True)
#: the name of the one http route
ROUTE_NAME = "split"

name = base.service_name


def host(target: base.Target, ctx: base.BuildContext, key: str) -> str:
    """The FQDN of component ``key``'s Service: ``<name>-<key>.<namespace>.svc.<cluster domain>``."""
    isvc = target.isvc
    return f"{base.component_name_of(isvc, key)}.{isvc.namespace}.svc.{ctx.cluster_domain}"


def build(target: base.Target, ctx: base.BuildContext) -> base.Obj | None:
    if target.route.router is not base.Router.ISTIO or target.component_named(labels.CANARY) is None:
        return None
    port = target.isvc.port
    destinations: list[base.Obj] = [
        {"destination": {"host": host(target, ctx, key), "port": {"number": port}}, "weight": weight}
        for key, weight in target.ordered_weights()
    ]
    return {
        "apiVersion": KIND.resource().api_version,
        "kind": KIND.kind,
        "metadata": base.metadata(target, ctx, name(target), per_component=False),
        "spec": {
            "hosts": [host(target, ctx, labels.PREDICTOR)],
            "http": [{"name": ROUTE_NAME, "route": destinations}],
        },
    }


def _component_key(host_: str, isvc_name: str, namespace: str | None) -> str | None:
    """The component key of a destination host ``<name>-<key>[.<namespace>[.svc...]]``, else None
    (a Service of another InferenceService or namespace)."""
    first, _, rest = host_.partition(".")
    prefix = f"{isvc_name}-"
    if not first.startswith(prefix) or first == prefix:
        return None
    if rest and namespace is not None and rest.split(".", 1)[0] != namespace:
        return None
    return first[len(prefix) :]


def live_weights(live: base.Obj | None) -> dict[str, int] | None:
    """The weight of each component key in a VirtualService's ``split`` route (else its first http
    route); None without an object. A destination without a weight gets 100 when it is the only
    one (Istio's rule), else 0; a host that is no component of this InferenceService is kept under
    its full host name (so it never compares equal to a desired split)."""
    if live is None:
        return None
    isvc_name, namespace = objects.name(live), objects.namespace(live)
    http = (live.get("spec") or {}).get("http") or []
    route = next((r for r in http if r.get("name") == ROUTE_NAME), http[0] if http else {})
    destinations = route.get("route") or []
    out: dict[str, int] = {}
    for d in destinations:
        host_ = str((d.get("destination") or {}).get("host") or "")
        key = _component_key(host_, isvc_name, namespace) or host_
        weight = d.get("weight")
        if weight is None:
            weight = 100 if len(destinations) == 1 else 0
        out[key] = out.get(key, 0) + int(weight)
    return out


def applied(live: base.Obj | None, ctx: base.BuildContext) -> bool:
    """Whether the mesh has taken in the live route's current generation: Istio says so in
    ``status.observedGeneration`` when its status reporting is on; without it (or without a route)
    there is nothing to wait for, and the route counts as applied."""
    if live is None:
        return True
    observed = (live.get("status") or {}).get("observedGeneration")
    return observed is None or int(observed) >= objects.generation(live)


def condition(
    target: base.Target, ctx: base.BuildContext, desired: base.Obj | None, live: base.Obj | None
) -> base.ChildCondition | None:
    if desired is None:
        return None
    if live is None:
        return base.not_found(CONDITION, KIND, name(target))
    have, want = live_weights(live), live_weights(desired)
    shown, wanted = (
        base.describe_weights(have or {}, "no destinations"),
        base.describe_weights(want or {}, "no destinations"),
    )
    if have == want:
        return base.ChildCondition(
            CONDITION,
            "True",
            "WeightsApplied",
            f"{KIND.kind} {name(target)}: {shown}",
        )
    return base.ChildCondition(
        CONDITION,
        "Unknown",
        "Pending",
        f"{KIND.kind} {name(target)}: {shown}, want {wanted}",
    )


RBAC = base.child_rbac(
    KIND,
    why="the VirtualService splitting canary traffic: watched (owns, while its CRD exists), applied, "
    "repaired, deleted",
)
CHILD = base.Child(
    "virtualservice", KIND, CONDITION, name, build, condition, serving=False, per_component=False
)
