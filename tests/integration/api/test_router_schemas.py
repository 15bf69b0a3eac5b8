"""The router children against the REAL upstream CRD schemas (istio.io/api's VirtualService, the
Gateway API standard channel's HTTPRoute) on a real kube-apiserver.

What the builders make is server-side applied (as the reconciler does, with
``fieldValidation=Strict`` on top) at every version the child kind speaks: the API server accepts
it, and what it stores (after defaulting) is exactly what was built, so the reconciler's subset
compare never sees a difference it cannot write away. Invalid variants show that the same schemas
do reject (so these tests can fail); note that server-side apply answers a field unknown to the
schema, or a value of the wrong type, with a 500 (whatever the field validation), before the
schema's 422 checks. The CRDs are the local cluster's (installed with it); against another
cluster they are installed idempotently when missing.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import base, httproute, virtualservice
from mlops_platform.devcluster import crds
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport.client import JSON, ApiError, Client
from mlops_platform.testing.schemas import apply_strict

WEIGHTS = {labels.PREDICTOR: 80, labels.CANARY: 20}
GATEWAY_CTX = base.BuildContext(gateway="gateways/public", ingress_domain="models.example.org")


def target(namespace: str, router: base.Router) -> base.Target:
    isvc = internal.InferenceService("m", namespace, "u", 1, "triton", "gs://b/m/1")
    comps = (base.predictor(isvc), base.Component(labels.CANARY, "gs://b/m/2", "Canary", 1, 1))
    return base.Target(isvc, comps[0], base.Route(router, WEIGHTS), comps)


def build_virtualservice(namespace: str) -> JSON:
    obj = virtualservice.build(target(namespace, base.Router.ISTIO), base.BuildContext())
    assert obj is not None
    return obj


def build_httproute(namespace: str) -> JSON:
    obj = httproute.build(target(namespace, base.Router.GATEWAY_API), GATEWAY_CTX)
    assert obj is not None
    return obj


@pytest.fixture(scope="module")
async def served(admin_client: Client) -> dict[str, JSON]:
    """The installed CRD of each router kind (installed when missing)."""
    out: dict[str, JSON] = {}
    for kind in (virtualservice.KIND, httproute.KIND):
        try:
            out[kind.kind] = await admin_client.get(resources.CRD, kind.crd_name)
        except ApiError as e:
            if not e.not_found:
                raise
            await crds.install(admin_client)
            admin_client.forget_discovery()
            out[kind.kind] = await admin_client.get(resources.CRD, kind.crd_name)
    return out


@pytest.mark.parametrize("kind", [virtualservice.KIND, httproute.KIND], ids=lambda k: k.kind)
def test_every_version_the_kind_speaks_is_served_and_v1_is_preferred(
    served: dict[str, JSON], kind: kinds.Kind
) -> None:
    crd = served[kind.kind]
    versions = {v["name"] for v in crd["spec"]["versions"] if v.get("served")}
    assert set(kind.versions) <= versions
    assert kinds.served_version(kind, crd) == kind.versions[0] == "v1"


@dataclasses.dataclass(frozen=True)
class Router:
    """One weighted router's child: its kind, what the operator builds (in a namespace), and how it
    reads the weights back from a live object."""

    kind: kinds.Kind
    build: Callable[[str], JSON]
    live_weights: Callable[[JSON | None], dict[str, int] | None]


@pytest.fixture(
    params=[
        Router(virtualservice.KIND, build_virtualservice, virtualservice.live_weights),
        Router(httproute.KIND, build_httproute, httproute.live_weights),
    ],
    ids=lambda r: r.kind.kind,
)
def router(request: pytest.FixtureRequest, served: dict[str, JSON]) -> Router:
    """Each router, its CRD served (``served``)."""
    chosen: Router = request.param
    return chosen


async def test_the_built_split_is_accepted_at_every_version(
    router: Router, admin_client: Client, namespace: str
) -> None:
    obj = router.build(namespace)
    for version in router.kind.versions:
        answer = await apply_strict(admin_client, router.kind, obj, version, dry_run=True)
        assert answer["spec"] == obj["spec"], version
        assert router.live_weights(answer) == WEIGHTS


async def test_the_stored_split_is_what_was_built(
    router: Router, admin_client: Client, namespace: str
) -> None:
    kind, obj = router.kind, router.build(namespace)
    await apply_strict(admin_client, kind, obj, kind.versions[0], dry_run=False)
    live = await admin_client.get(kind.resource(), obj["metadata"]["name"], namespace)
    assert live["spec"] == obj["spec"]  # nothing defaulted in: no perpetual drift
    assert live["metadata"]["labels"] == obj["metadata"]["labels"]
    assert router.live_weights(live) == WEIGHTS
    for version in kind.versions[1:]:  # and read back the same at the older versions
        older = await admin_client.get(kind.resource(version), obj["metadata"]["name"], namespace)
        assert older["spec"] == obj["spec"], version


def _mutated(build: Callable[[str], JSON], mutate: Callable[[JSON], None]) -> Callable[[str], JSON]:
    """A factory of what ``build`` makes in a namespace, its spec changed by ``mutate``."""

    def make(namespace: str) -> JSON:
        obj = copy.deepcopy(build(namespace))
        mutate(obj["spec"])
        return obj

    return make


def _backends(spec: JSON) -> list[JSON]:
    backends: list[JSON] = spec["rules"][0]["backendRefs"]
    return backends


def _negative_weight(spec: JSON) -> None:
    _backends(spec)[1]["weight"] = -1


def _too_many_backends(spec: JSON) -> None:
    _backends(spec).extend(dict(_backends(spec)[0], name=f"m-extra-{i}") for i in range(15))


def _service_without_port(spec: JSON) -> None:
    del _backends(spec)[1]["port"]


def _misspelt_weight(spec: JSON) -> None:
    _backends(spec)[1]["weigth"] = _backends(spec)[1].pop("weight")


def _destination_without_host(spec: JSON) -> None:
    del spec["http"][0]["route"][1]["destination"]["host"]


def _weight_as_text(spec: JSON) -> None:
    spec["http"][0]["route"][1]["weight"] = "20%"


# (id, kind, object factory, expected HTTP status, substrings of the server's message); a value of
# the wrong type or an unknown field fails server-side apply before validation, as a 500
INVALID: list[tuple[str, kinds.Kind, Any, int, tuple[str, ...]]] = [
    (
        "httproute-negative-weight",
        httproute.KIND,
        _mutated(build_httproute, _negative_weight),
        422,
        ("spec.rules[0].backendRefs[1].weight", "greater than or equal to 0"),
    ),
    (
        "httproute-17-backends",
        httproute.KIND,
        _mutated(build_httproute, _too_many_backends),
        422,
        ("spec.rules[0].backendRefs", "must have at most 16 items"),
    ),
    (
        "httproute-service-without-port",
        httproute.KIND,
        _mutated(build_httproute, _service_without_port),
        422,
        ("Must have port for Service reference",),
    ),
    (
        "httproute-misspelt-field",
        httproute.KIND,
        _mutated(build_httproute, _misspelt_weight),
        500,  # server-side apply fails to make its typed patch: a 500, not a 400
        (".spec.rules[0].backendRefs[1].weigth: field not declared in schema",),
    ),
    (
        "virtualservice-destination-without-host",
        virtualservice.KIND,
        _mutated(build_virtualservice, _destination_without_host),
        422,
        ("spec.http[0].route[1].destination.host", "Required value"),
    ),
    (
        "virtualservice-weight-as-text",
        virtualservice.KIND,
        _mutated(build_virtualservice, _weight_as_text),
        500,
        (".spec.http[0].route[1].weight: expected numeric (int or float), got string",),
    ),
]


@pytest.mark.parametrize(
    ("kind", "make", "status", "expected"), [pytest.param(*case[1:], id=case[0]) for case in INVALID]
)
async def test_the_real_schemas_reject_invalid_splits(
    served: dict[str, JSON],
    admin_client: Client,
    namespace: str,
    kind: kinds.Kind,
    make: Any,
    status: int,
    expected: tuple[str, ...],
) -> None:
    with pytest.raises(ApiError) as info:
        await apply_strict(admin_client, kind, make(namespace), kind.versions[0], dry_run=True)
    assert info.value.status == status, info.value.message
    for text in expected:
        assert text in info.value.message, info.value.message
