"""Conversion between v1alpha1, v1beta1 and v1: lossless round trips over generated valid objects
(hypothesis), the meaning kept in every version, and Failure results for bad ConversionReviews."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlops_platform import api
from mlops_platform.api import conversion
from mlops_platform.testing import conversion as gen
from mlops_platform.webhooks import conversion as webhook

JSON = dict[str, Any]
VERSIONS = conversion.VERSIONS
#: examples per source version (MLOPS_CONVERSION_EXAMPLES): 1,000 in `make test`, 3,400 (3 x 3,400 >= 10,000)
#: in `make test-conversion`
EXAMPLES = int(os.environ.get("MLOPS_CONVERSION_EXAMPLES", "1000"))
_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_REVIEWS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def api_version(version: str) -> str:
    return f"mlops.platform/{version}"


def without_stash(obj: JSON) -> JSON:
    out = copy.deepcopy(obj)
    annotations = out["metadata"].get("annotations") or {}
    annotations.pop(conversion.ANNOTATION, None)
    if not annotations:
        out["metadata"].pop("annotations", None)
    return out


def meaning(obj: JSON) -> object:
    """What the operator makes of ``obj`` (it reads v1): its internal model, or the error's type."""
    try:
        return api.decode(conversion.to_hub(obj))
    except api.ValidationError as e:
        return type(e)


def check_round_trips(obj: JSON) -> None:
    source = conversion.version_of(obj)
    expected = meaning(obj)
    for target in VERSIONS:
        there = conversion.convert(obj, api_version(target))
        assert there["apiVersion"] == api_version(target)
        # only apiVersion, spec and the conversion annotation change
        assert without_stash(there)["metadata"] == without_stash(obj)["metadata"]
        assert there.get("status") == obj.get("status")
        assert {k for k in there if k not in ("apiVersion", "spec", "metadata")} == {
            k for k in obj if k not in ("apiVersion", "spec", "metadata")
        }
        back = conversion.convert(there, api_version(source))
        assert back == obj, f"{source} -> {target} -> {source} is not the identity"
        # the same service, whichever version it is read in
        assert meaning(there) == expected
        for third in VERSIONS:  # and through a third version
            assert (
                conversion.convert(conversion.convert(there, api_version(third)), api_version(source)) == obj
            )


@pytest.mark.parametrize("version", VERSIONS)
def test_every_pair_of_versions_round_trips_to_the_identical_object(version: str) -> None:
    @_SETTINGS
    @given(gen.objects(version))
    def run(obj: JSON) -> None:
        check_round_trips(obj)

    run()


def service(version: str, name: str, spec: JSON) -> JSON:
    """An InferenceService of ``version`` (``v1alpha1``...) named ``name`` in ``ml``, its schema's
    defaults applied (as the API server stores it)."""
    metadata = {"name": name, "namespace": "ml"}
    obj = {
        "apiVersion": f"mlops.platform/{version}",
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": spec,
    }
    return gen.defaulted(obj)


def test_a_v1alpha1_object_as_v1_and_back() -> None:
    spec = {
        "modelUri": "gs://models/bert/7",
        "framework": "triton",
        "maxReplicas": 4,
        "gpuPerReplica": 1,
        "resources": {"cpuRequest": "500m", "memoryLimit": "4Gi"},
        "traffic": {"canaryVersion": "8", "canaryPercent": 20},
        "extensions": {"monitoring": {"enabled": False}, "team": "search"},
    }
    alpha = service("v1alpha1", "bert", spec)
    hub = conversion.convert(alpha, "mlops.platform/v1")
    assert hub["spec"] == {
        "predictor": {
            "model": {"uri": "gs://models/bert/7"},
            "runtime": "triton",
            "port": 8080,
            "resources": {
                "requests": {"cpu": "500m", "nvidia.com/gpu": 1},
                "limits": {"memory": "4Gi", "nvidia.com/gpu": 1},
            },
            "autoscaling": {"minReplicas": 1, "maxReplicas": 4},
        },
        "canary": {"model": {"uri": "gs://models/bert/8"}, "trafficPercent": 20},
        "monitoring": {"enabled": False},
        "extensions": {"team": "search"},
    }
    assert "annotations" not in hub["metadata"]  # nothing lost: no annotation needed
    assert conversion.convert(hub, "mlops.platform/v1alpha1") == alpha


def test_what_an_older_version_cannot_say_survives_in_the_annotation() -> None:
    autoscaling = {
        "minReplicas": 0,
        "maxReplicas": 3,
        "targetUtilization": {"memory": 70},
        "scaleToZero": {"cooldownSeconds": 60},
    }
    predictor = {
        "model": {"uri": "s3://b/m/1", "format": "onnx"},
        "runtime": "vllm",
        "resources": {"limits": {"example.com/fpga": 1}},
        "autoscaling": autoscaling,
    }
    hub = service("v1", "m", {"predictor": predictor})
    beta = conversion.convert(hub, "mlops.platform/v1beta1")
    assert conversion.ANNOTATION in beta["metadata"]["annotations"]
    assert "targetUtilization" not in beta["spec"]["predictor"]["autoscaling"]
    alpha = conversion.convert(beta, "mlops.platform/v1alpha1")
    assert alpha["spec"]["framework"] == "vllm"
    assert conversion.convert(alpha, "mlops.platform/v1") == hub
    # an edit in v1beta1 keeps the v1-only settings it could not see
    beta["spec"]["predictor"]["autoscaling"]["maxReplicas"] = 5
    edited = conversion.convert(beta, "mlops.platform/v1")["spec"]["predictor"]["autoscaling"]
    assert edited == {**hub["spec"]["predictor"]["autoscaling"], "maxReplicas": 5}
    # an edit that changes the model drops the format that belonged to the old one (v1alpha1 has none)
    alpha["spec"]["modelUri"] = "s3://b/m/2"
    model = conversion.convert(alpha, "mlops.platform/v1")["spec"]["predictor"]["model"]
    assert model == {"uri": "s3://b/m/2"}


def review(objects: list[Any], desired: str = "mlops.platform/v1", uid: str = "u-7") -> JSON:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    }


def answer(body: Any) -> JSON:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    out: JSON = json.loads(webhook.review(raw))
    assert out["apiVersion"] == "apiextensions.k8s.io/v1" and out["kind"] == "ConversionReview"
    return out["response"]


@_REVIEWS
@given(st.lists(st.sampled_from(VERSIONS).flatmap(gen.objects), max_size=4), st.sampled_from(VERSIONS))
def test_a_review_converts_every_object_in_order_with_the_same_uid(objects: list[JSON], desired: str) -> None:
    response = answer(review(objects, api_version(desired), uid="abc"))
    assert response["uid"] == "abc" and response["result"] == {"status": "Success"}
    converted = response["convertedObjects"]
    assert [o["metadata"]["name"] for o in converted] == [o["metadata"]["name"] for o in objects]
    assert all(o["apiVersion"] == api_version(desired) for o in converted)
    assert converted == [conversion.convert(o, api_version(desired)) for o in objects]


def _break(obj: JSON, how: int) -> Any:
    bad = copy.deepcopy(obj)
    spec = bad["spec"]
    if how == 0:
        bad["apiVersion"] = "mlops.platform/v9"
    elif how == 1:
        spec.clear()
    elif how == 2:
        bad["kind"] = "Deployment"
    elif how == 3:
        (spec.get("predictor") or spec)["port"] = "eighty"
    elif how == 4:
        bad["metadata"] = ["not", "a", "map"]
    elif how == 5:
        bad["metadata"].setdefault("annotations", {})[conversion.ANNOTATION] = "{not json"
    elif how == 6:
        return "a string"
    else:
        spec["unknownField"] = 1
    return bad


@_SETTINGS
@given(
    st.sampled_from(VERSIONS).flatmap(gen.objects),
    st.integers(0, 7),
    st.sampled_from(VERSIONS),
    st.integers(0, 3),
)
def test_invalid_objects_get_a_failure_naming_the_object(
    obj: JSON, how: int, desired: str, position: int
) -> None:
    if how == 5 and api_version(desired) == obj["apiVersion"]:
        desired = next(v for v in VERSIONS if api_version(v) != obj["apiVersion"])  # same version: untouched
    objects: list[Any] = [obj] * position + [_break(obj, how)]
    response = answer(review(objects, api_version(desired)))
    assert response["uid"] == "u-7"
    assert response["result"]["status"] == "Failure"
    assert f"request.objects[{position}]" in response["result"]["message"]
    assert "convertedObjects" not in response


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "not JSON"),
        (b"\xff", "not JSON"),
        (b"[]", "expected a ConversionReview"),
        ({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}, "request.uid"),
        ({**review([]), "apiVersion": "apiextensions.k8s.io/v1beta1"}, "apiVersion/kind"),
        (review([], desired="mlops.platform/v2"), "request.desiredAPIVersion"),
        (review([], desired="apps/v1"), "request.desiredAPIVersion"),
        (
            {**review([]), "request": {"uid": "u", "desiredAPIVersion": "mlops.platform/v1"}},
            "request.objects",
        ),
    ],
)
def test_bad_reviews_get_a_failure_never_a_crash(body: Any, message: str) -> None:
    response = answer(body)
    assert response["result"]["status"] == "Failure"
    assert message in response["result"]["message"]


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=200)
    | st.recursive(
        st.none() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=8,
    ).map(lambda v: json.dumps(v).encode())
)
def test_random_bodies_never_crash(body: bytes) -> None:
    response = answer(body)
    assert response["result"]["status"] in ("Success", "Failure")


def test_model_delivery_settings_map_between_v1alpha1_extensions_and_v1_fields() -> None:
    storage = {"secretName": "s3-creds", "endpoint": "http://minio.storage:9000", "region": "eu-central-1"}
    delivery = {**storage, "sha256": "0" * 64, "serviceAccountName": "model-reader"}
    spec = {
        "modelUri": "s3://models/iris/1",
        "framework": "seldon",
        "traffic": {"canaryVersion": "2", "canaryPercent": 10},
        "extensions": {"storage": delivery, "team": "fraud"},
    }
    alpha = service("v1alpha1", "iris", spec)
    hub = conversion.convert(alpha, "mlops.platform/v1")
    predictor = hub["spec"]["predictor"]
    assert predictor["model"] == {"uri": "s3://models/iris/1", "sha256": "0" * 64, "storage": storage}
    assert predictor["serviceAccountName"] == "model-reader"
    assert hub["spec"]["extensions"] == {"team": "fraud"}
    assert "annotations" not in hub["metadata"]
    assert conversion.convert(hub, "mlops.platform/v1alpha1") == alpha
    # v1beta1 says them as the same fields as v1
    beta = conversion.convert(hub, "mlops.platform/v1beta1")
    assert beta["spec"]["predictor"]["model"] == predictor["model"]
    assert beta["spec"]["predictor"]["serviceAccountName"] == "model-reader"
    # the candidate's own checksum and storage, which v1alpha1 cannot say, survive an edit there
    hub["spec"]["canary"]["model"] |= {"sha256": "f" * 64, "storage": {"secretName": "staging"}}
    alpha = conversion.convert(hub, "mlops.platform/v1alpha1")
    alpha["spec"]["maxReplicas"] = 3
    back = conversion.convert(alpha, "mlops.platform/v1")
    assert back["spec"]["canary"]["model"] == hub["spec"]["canary"]["model"]
    assert back["spec"]["predictor"]["autoscaling"]["maxReplicas"] == 3
