"""The router children (pure): the Istio VirtualService and the Gateway API HTTPRoute that split canary
traffic — when they are desired, what they hold, their weights read back (a hypothesis round trip
over every split) and their ``TrafficSplitReady`` conditions from live objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import base, httproute, virtualservice

Obj = dict[str, Any]
ISVC = internal.InferenceService(
    name="m", namespace="ns", uid="u", generation=1, framework="triton", model_uri="gs://b/m/1"
)
PREDICTOR = base.predictor(ISVC)
CANARY = base.Component(labels.CANARY, "gs://b/m/2", "Canary", 1, 1)
BOTH = (PREDICTOR, CANARY)
CTX = base.BuildContext()
GW_CTX = base.BuildContext(gateway="gateways/public", ingress_domain="models.example.org")


def target(
    router: base.Router = base.Router.ISTIO,
    weights: dict[str, int] | None = None,
    comps: tuple[base.Component, ...] = BOTH,
) -> base.Target:
    route = base.Route(router, {"predictor": 80, "canary": 20} if weights is None else weights)
    return base.Target(ISVC, comps[0], route, comps)


def built(module: Any, t: base.Target, ctx: base.BuildContext) -> Obj:
    obj = module.build(t, ctx)
    assert obj is not None
    return obj  # type: ignore[no-any-return]


# -- VirtualService ------------------------------------------------------------------------------


def test_virtualservice_splits_the_predictor_host_between_the_component_services() -> None:
    vs = built(virtualservice, target(), CTX)
    assert (vs["apiVersion"], vs["kind"]) == ("networking.istio.io/v1", "VirtualService")
    meta = vs["metadata"]
    assert (meta["name"], meta["namespace"]) == ("m", "ns")
    assert labels.COMPONENT not in meta["labels"]
    assert meta["labels"][labels.K8S_COMPONENT] == labels.SERVICE_COMPONENT
    assert vs["spec"] == {
        "hosts": ["m-predictor.ns.svc.cluster.local"],
        "http": [
            {
                "name": "split",
                "route": [
                    {
                        "destination": {"host": "m-predictor.ns.svc.cluster.local", "port": {"number": 8080}},
                        "weight": 80,
                    },
                    {
                        "destination": {"host": "m-canary.ns.svc.cluster.local", "port": {"number": 8080}},
                        "weight": 20,
                    },
                ],
            }
        ],
    }


def test_virtualservice_follows_the_cluster_domain_the_port_and_component_order() -> None:
    isvc = internal.InferenceService("m", "ns", "u", 1, "triton", "gs://b/m/1", port=9000)
    comps = (base.predictor(isvc), CANARY)
    # weights listed canary first: the destinations still follow component order
    t = base.Target(isvc, comps[0], base.Route(base.Router.ISTIO, {"canary": 60, "predictor": 40}), comps)
    vs = built(virtualservice, t, base.BuildContext(cluster_domain="k8s.internal"))
    assert vs["spec"]["hosts"] == ["m-predictor.ns.svc.k8s.internal"]
    route = vs["spec"]["http"][0]["route"]
    assert [(d["destination"]["host"], d["destination"]["port"]["number"], d["weight"]) for d in route] == [
        ("m-predictor.ns.svc.k8s.internal", 9000, 40),
        ("m-canary.ns.svc.k8s.internal", 9000, 60),
    ]


def test_a_canary_taking_all_traffic_is_the_only_destination() -> None:
    vs = built(virtualservice, target(weights={"canary": 100}), CTX)
    assert [d["destination"]["host"] for d in vs["spec"]["http"][0]["route"]] == [
        "m-canary.ns.svc.cluster.local"
    ]
    assert virtualservice.live_weights(vs) == {"canary": 100}


@pytest.mark.parametrize(
    "t",
    [
        pytest.param(target(comps=(PREDICTOR,), weights={"predictor": 100}), id="no-canary"),
        pytest.param(target(base.Router.GATEWAY_API), id="gateway-api-router"),
        pytest.param(target(base.Router.REPLICAS), id="replicas-router"),
    ],
)
def test_no_virtualservice_without_istio_and_a_canary(t: base.Target) -> None:
    assert virtualservice.build(t, CTX) is None
    assert virtualservice.condition(t, CTX, None, None) is None
    assert virtualservice.name(t) == "m"  # named also when not desired, so a stale one is found


@pytest.mark.parametrize(
    ("router", "group", "kind_name", "plural", "contributes"),
    [
        (virtualservice, "networking.istio.io", "VirtualService", "virtualservices", False),
        (httproute, "gateway.networking.k8s.io", "HTTPRoute", "httproutes", True),
    ],
    ids=["virtualservice", "httproute"],
)
def test_a_router_child_and_its_rbac(
    router: Any, group: str, kind_name: str, plural: str, contributes: bool
) -> None:
    """An optional child of the whole InferenceService that gates no Ready, preferring v1; the
    HTTPRoute also contributes (its URL), the VirtualService does not."""
    child = router.CHILD
    assert (child.key, child.condition_type, child.serving, child.per_component) == (
        kind_name.lower(),
        "TrafficSplitReady",
        False,
        False,
    )
    assert (child.contribute is not None) == contributes
    kind = router.KIND
    assert (kind.group, kind.kind, kind.plural, kind.optional) == (group, kind_name, plural, True)
    assert kind.versions[0] == "v1"
    assert (router.RBAC.group, router.RBAC.resource) == (group, plural)


def test_virtualservice_live_weights() -> None:
    assert virtualservice.live_weights(None) is None
    vs = built(virtualservice, target(), CTX)
    assert virtualservice.live_weights(vs) == {"predictor": 80, "canary": 20}
    live = copy.deepcopy(vs)
    route = live["spec"]["http"][0]["route"]
    route[0]["destination"]["host"] = "m-predictor"  # a short host is ours too
    route[1]["destination"]["host"] = "m-canary.ns"
    assert virtualservice.live_weights(live) == {"predictor": 80, "canary": 20}
    route[1]["destination"]["host"] = "m-canary.other.svc.cluster.local"  # another namespace's
    assert virtualservice.live_weights(live) == {"predictor": 80, "m-canary.other.svc.cluster.local": 20}
    del route[1]
    del route[0]["weight"]  # Istio: the only destination takes everything
    assert virtualservice.live_weights(live) == {"predictor": 100}
    live["spec"]["http"] = []
    assert virtualservice.live_weights(live) == {}


def test_virtualservice_live_weights_read_the_split_route() -> None:
    live = built(virtualservice, target(), CTX)
    other = {"name": "debug", "route": [{"destination": {"host": "m-canary"}, "weight": 100}]}
    live["spec"]["http"].insert(0, other)
    assert virtualservice.live_weights(live) == {"predictor": 80, "canary": 20}


def test_virtualservice_condition() -> None:
    t = target()
    desired = built(virtualservice, t, CTX)
    assert virtualservice.condition(t, CTX, desired, None) == base.not_found(
        "TrafficSplitReady", virtualservice.KIND, "m"
    )
    ready = virtualservice.condition(t, CTX, desired, copy.deepcopy(desired))
    assert ready == base.ChildCondition(
        "TrafficSplitReady", "True", "WeightsApplied", "VirtualService m: 80 % predictor, 20 % canary"
    )
    stale = built(virtualservice, target(weights={"predictor": 95, "canary": 5}), CTX)
    pending = virtualservice.condition(t, CTX, desired, stale)
    assert pending is not None
    assert (pending.status, pending.reason) == ("Unknown", "Pending")
    assert "95 % predictor, 5 % canary" in pending.message
    assert "want 80 % predictor, 20 % canary" in pending.message


# -- HTTPRoute -----------------------------------------------------------------------------------


def test_httproute_attaches_to_the_gateway_and_splits_between_the_component_services() -> None:
    t = target(base.Router.GATEWAY_API)
    route = built(httproute, t, GW_CTX)
    assert (route["apiVersion"], route["kind"]) == ("gateway.networking.k8s.io/v1", "HTTPRoute")
    assert (route["metadata"]["name"], route["metadata"]["namespace"]) == ("m", "ns")
    assert labels.COMPONENT not in route["metadata"]["labels"]
    assert route["spec"] == {
        "parentRefs": [
            {
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                "namespace": "gateways",
                "name": "public",
            }
        ],
        "hostnames": ["m.ns.models.example.org"],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [
                    {"group": "", "kind": "Service", "name": "m-predictor", "port": 8080, "weight": 80},
                    {"group": "", "kind": "Service", "name": "m-canary", "port": 8080, "weight": 20},
                ],
            }
        ],
    }
    assert httproute.hostname(t, GW_CTX) == "m.ns.models.example.org"
    assert httproute.url(t, GW_CTX) == "http://m.ns.models.example.org"


def test_httproute_exists_without_a_canary() -> None:
    t = target(base.Router.GATEWAY_API, {"predictor": 100}, (PREDICTOR,))
    route = built(httproute, t, GW_CTX)
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "", "kind": "Service", "name": "m-predictor", "port": 8080, "weight": 100}
    ]
    assert httproute.contribute(t, GW_CTX, None) == base.Contribution(url="http://m.ns.models.example.org")


def test_a_bare_gateway_name_is_in_the_inferenceservice_namespace() -> None:
    route = built(httproute, target(base.Router.GATEWAY_API), base.BuildContext(gateway="public"))
    [ref] = route["spec"]["parentRefs"]
    assert (ref["namespace"], ref["name"]) == ("ns", "public")


@pytest.mark.parametrize(
    ("t", "ctx"),
    [
        pytest.param(target(base.Router.GATEWAY_API), CTX, id="no-gateway"),
        pytest.param(target(base.Router.ISTIO), GW_CTX, id="istio-router"),
        pytest.param(target(base.Router.REPLICAS), GW_CTX, id="replicas-router"),
    ],
)
def test_no_httproute_without_the_gateway_api_router_and_a_gateway(
    t: base.Target, ctx: base.BuildContext
) -> None:
    assert httproute.build(t, ctx) is None
    assert httproute.condition(t, ctx, None, None) is None
    assert httproute.contribute(t, ctx, None) == base.Contribution()
    assert httproute.name(t) == "m"


def test_the_httproute_contributes_its_own_and_speaks_v1_and_v1beta1() -> None:
    assert httproute.CHILD.contribute is httproute.contribute
    assert httproute.KIND.versions == ("v1", "v1beta1")


def test_httproute_live_weights() -> None:
    assert httproute.live_weights(None) is None
    live = built(httproute, target(base.Router.GATEWAY_API), GW_CTX)
    assert httproute.live_weights(live) == {"predictor": 80, "canary": 20}
    backends = live["spec"]["rules"][0]["backendRefs"]
    for b in backends:  # the API's defaults
        del b["group"], b["kind"]
    del backends[1]["weight"]
    assert httproute.live_weights(live) == {"predictor": 80, "canary": 1}
    backends[1]["namespace"] = "other"
    assert httproute.live_weights(live) == {"predictor": 80, "Service/other/m-canary": 1}
    live["spec"]["rules"] = []
    assert httproute.live_weights(live) == {}


def _with_parent_status(route: Obj, status: str | None, reason: str = "Accepted", message: str = "") -> Obj:
    live = copy.deepcopy(route)
    conditions = [] if status is None else [{"type": "Accepted", "status": status, "reason": reason}]
    if message:
        conditions[0]["message"] = message
    live["status"] = {
        "parents": [
            {  # another Gateway's verdict is not ours
                "parentRef": {"namespace": "gateways", "name": "internal"},
                "controllerName": "example.org/gateway",
                "conditions": [{"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners"}],
            },
            {
                "parentRef": {
                    "group": "gateway.networking.k8s.io",
                    "namespace": "gateways",
                    "name": "public",
                },
                "controllerName": "example.org/gateway",
                "conditions": conditions,
            },
        ]
    }
    return live


def test_httproute_condition() -> None:
    t = target(base.Router.GATEWAY_API)
    desired = built(httproute, t, GW_CTX)
    assert httproute.condition(t, GW_CTX, desired, None) == base.not_found(
        "TrafficSplitReady", httproute.KIND, "m"
    )
    # no Gateway controller reports on the route (none runs): the weights are applied all the same
    ready = httproute.condition(t, GW_CTX, desired, copy.deepcopy(desired))
    assert ready == base.ChildCondition(
        "TrafficSplitReady",
        "True",
        "WeightsApplied",
        "HTTPRoute m: 80 % predictor, 20 % canary; not yet accepted by Gateway gateways/public",
    )
    accepted = httproute.condition(t, GW_CTX, desired, _with_parent_status(desired, "True"))
    assert accepted is not None
    assert (accepted.status, accepted.reason) == ("True", "WeightsApplied")
    assert accepted.message.endswith("; accepted by Gateway gateways/public")
    rejected = _with_parent_status(desired, "False", "NotAllowedByListeners", "namespace not allowed")
    refused = httproute.condition(t, GW_CTX, desired, rejected)
    assert refused == base.ChildCondition(
        "TrafficSplitReady",
        "False",
        "NotAllowedByListeners",
        "HTTPRoute m not accepted by Gateway gateways/public: namespace not allowed",
    )
    stale = built(httproute, target(base.Router.GATEWAY_API, {"predictor": 100}), GW_CTX)
    pending = httproute.condition(t, GW_CTX, desired, _with_parent_status(stale, "True"))
    assert pending is not None
    assert (pending.status, pending.reason) == ("Unknown", "Pending")
    assert "100 % predictor, want 80 % predictor, 20 % canary" in pending.message


def test_a_gateway_verdict_on_an_older_generation_of_the_route_is_not_counted() -> None:
    t = target(base.Router.GATEWAY_API)
    desired = built(httproute, t, GW_CTX)
    live = _with_parent_status(desired, "False", "NotAllowedByListeners", "namespace not allowed")
    live["metadata"]["generation"] = 3
    live["status"]["parents"][1]["conditions"][0]["observedGeneration"] = 2
    stale = httproute.condition(t, GW_CTX, desired, live)
    assert stale is not None
    assert (stale.status, stale.reason) == ("True", "WeightsApplied")
    assert stale.message.endswith("; not yet accepted by Gateway gateways/public")
    live["status"]["parents"][1]["conditions"][0]["observedGeneration"] = 3
    current = httproute.condition(t, GW_CTX, desired, live)
    assert current is not None
    assert (current.status, current.reason) == ("False", "NotAllowedByListeners")


def test_the_route_counts_as_applied_once_the_gateway_reports_on_its_generation() -> None:
    desired = built(httproute, target(base.Router.GATEWAY_API), GW_CTX)
    assert httproute.applied(None, GW_CTX)
    assert httproute.applied(desired, GW_CTX)  # no controller reports on it: nothing routes by it
    live = _with_parent_status(desired, "True")
    live["metadata"]["generation"] = 4
    ours = live["status"]["parents"][1]["conditions"][0]
    ours["observedGeneration"] = 3  # the Gateway may still route by generation 3
    assert not httproute.applied(live, GW_CTX)
    assert httproute.applied(live, CTX)  # no Gateway configured: not ours to wait for
    live["status"]["parents"][0]["conditions"][0]["observedGeneration"] = 4  # another Gateway's
    assert not httproute.applied(live, GW_CTX)
    ours["observedGeneration"] = 4
    assert httproute.applied(live, GW_CTX)
    del ours["observedGeneration"]  # optional in the Gateway API: then it speaks of the route as it is
    assert httproute.applied(live, GW_CTX)


def test_the_virtualservice_counts_as_applied_once_istio_reports_its_generation() -> None:
    live = built(virtualservice, target(base.Router.ISTIO), CTX)
    live["metadata"]["generation"] = 2
    assert virtualservice.applied(None, CTX)
    assert virtualservice.applied(live, CTX)  # Istio's status reporting off: nothing to wait for
    live["status"] = {"observedGeneration": "1"}  # int64 in protobuf JSON: a string
    assert not virtualservice.applied(live, CTX)
    live["status"] = {"observedGeneration": 2}
    assert virtualservice.applied(live, CTX)


# -- both: the weights round trip ----------------------------------------------------------------


@st.composite
def splits(draw: st.DrawFn) -> dict[str, int]:
    """Route weights as the reconciler makes them: entries > 0 only, summing to 100."""
    canary = draw(st.integers(min_value=0, max_value=100))
    weights = {"predictor": 100 - canary, "canary": canary}
    return {k: w for k, w in weights.items() if w > 0}


@given(weights=splits(), port=st.integers(min_value=1, max_value=65535), canary_first=st.booleans())
def test_live_weights_round_trip_every_split(weights: dict[str, int], port: int, canary_first: bool) -> None:
    if canary_first:
        weights = dict(reversed(weights.items()))
    isvc = internal.InferenceService("m", "ns", "u", 1, "triton", "gs://b/m/1", port=port)
    comps = (base.predictor(isvc), CANARY)
    for router, module, ctx in (
        (base.Router.ISTIO, virtualservice, CTX),
        (base.Router.GATEWAY_API, httproute, GW_CTX),
    ):
        t = base.Target(isvc, comps[0], base.Route(router, weights), comps)
        obj = built(module, t, ctx)
        assert module.live_weights(obj) == weights
        assert sum(module.live_weights(obj).values()) == 100
        cond = module.condition(t, ctx, obj, copy.deepcopy(obj))
        assert (cond.status, cond.reason) == ("True", "WeightsApplied")
