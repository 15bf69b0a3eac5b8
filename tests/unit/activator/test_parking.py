"""What the activator decides from the parked Services' slices (pure)."""

from __future__ import annotations

from typing import Any

from mlops_platform.activator import contract, parking
from mlops_platform.activator.target import Target

IRIS = Target("ml", "iris-predictor")
BERT = Target("nlp", "bert-predictor")


def own_slice(t: Target, endpoints: list[tuple[str, bool]], name: str = "") -> dict[str, Any]:
    """A Service's own EndpointSlice (the EndpointSlice controller's), its labels copied from it."""
    return {
        "metadata": {
            "name": name or f"{t.service}-abcde",
            "namespace": t.namespace,
            "labels": {
                parking.SERVICE_NAME: t.service,
                parking.MANAGED_BY: "endpointslice-controller.k8s.io",
                contract.PARKED_KEY: contract.PARKED_VALUE,
            },
        },
        "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 8082}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in endpoints],
    }


def test_ready_endpoints_are_those_ready_on_the_http_port() -> None:
    s = own_slice(IRIS, [("10.0.0.2", True), ("10.0.0.1", False)])
    s["endpoints"].append({"addresses": ["10.0.0.3"], "conditions": {}})  # unset: ready
    assert parking.ready_endpoints([s]) == ["10.0.0.2:8080", "10.0.0.3:8080"]
    assert parking.ready_endpoints([s], "grpc") == []


def test_a_parked_service_without_its_parking_slice_is_parked_and_its_endpoints_known() -> None:
    p = parking.plan([own_slice(IRIS, [])], ["10.1.0.5"])
    assert p.park == (IRIS,) and p.unpark == ()
    assert p.ready == {IRIS: []}
    slice_ = parking.parking_slice(IRIS, "uid-1", ["10.1.0.6", "10.1.0.5"], 8012)
    assert slice_["metadata"]["name"] == "iris-predictor-activator"
    assert slice_["metadata"]["labels"][parking.MANAGED_BY] == parking.MANAGER
    assert slice_["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1", "kind": "Service", "name": "iris-predictor", "uid": "uid-1"
    }  # fmt: skip
    assert [e["addresses"] for e in slice_["endpoints"]] == [["10.1.0.5"], ["10.1.0.6"]]
    assert slice_["ports"] == [{"name": "http", "port": 8012, "protocol": "TCP"}]


def test_a_parking_slice_listing_the_activator_as_it_is_is_left_alone() -> None:
    ours = parking.parking_slice(IRIS, "uid-1", ["10.1.0.5"], 8012)
    up = own_slice(IRIS, [("10.0.0.7", True)])
    p = parking.plan([up, ours], ["10.1.0.5"])
    assert p.park == () and p.unpark == ()
    assert p.ready == {IRIS: ["10.0.0.7:8080"]}  # the model is ready: held requests go there
    # an activator pod replaced: the slice is written again
    assert parking.plan([up, ours], ["10.1.0.9"]).park == (IRIS,)
    # no activator pod ready: nothing to park onto (the Service keeps what it has)
    assert parking.plan([own_slice(BERT, [])], []).park == ()


def test_a_service_no_longer_parked_loses_its_parking_slice() -> None:
    ours = parking.parking_slice(IRIS, "uid-1", ["10.1.0.5"], 8012)
    p = parking.plan([ours, own_slice(BERT, [])], ["10.1.0.5"])
    assert p.unpark == (IRIS,) and p.park == (BERT,)
