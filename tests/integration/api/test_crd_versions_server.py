"""v1 and v1beta1 on a real kube-apiserver: defaults, and validation that names the field in the
version written (schema and CEL rules generated from the types), mirrored by the Python types."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlops_platform import api
from mlops_platform.api import conversion, crd, v1
from mlops_platform.runtime.transport.client import JSON, ApiError, Client, Resource

V1 = crd.RESOURCE
BETA = Resource(V1.group, "v1beta1", V1.plural, V1.kind)


def manifest(version: str = "v1", name: str = "model", **predictor: Any) -> JSON:
    spec: JSON = {"predictor": {"model": {"uri": "s3://models/resnet/1"}, "runtime": "triton", **predictor}}
    return {
        "apiVersion": f"mlops.platform/{version}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": spec,
    }


def with_spec(obj: JSON, **spec: Any) -> JSON:
    out = copy.deepcopy(obj)
    out["spec"].update(spec)
    return out


async def create_strict(client: Client, resource: Resource, namespace: str, obj: JSON) -> JSON:
    return await client.request(
        "POST", resource.path(namespace), params={"fieldValidation": "Strict"}, body=obj, resource="isvc"
    )


async def test_v1_is_defaulted_and_stored_as_written(
    installed: JSON, admin_client: Client, namespace: str
) -> None:
    created = await create_strict(admin_client, V1, namespace, manifest())
    assert created["spec"]["predictor"]["port"] == 8080
    assert created["spec"]["predictor"]["autoscaling"] == {"minReplicas": 1, "maxReplicas": 1}
    assert "annotations" not in created["metadata"]
    model = api.decode(created)
    assert (model.framework, model.min_replicas, model.max_replicas) == ("triton", 1, 1)
    beta = await create_strict(admin_client, BETA, namespace, manifest("v1beta1", name="beta"))
    assert beta["spec"]["predictor"]["autoscaling"] == {"minReplicas": 1, "maxReplicas": 1}
    stored = await admin_client.get(V1, "beta", namespace)
    assert stored["spec"] == conversion.convert(beta, v1.API_VERSION)["spec"]


# (id, version, object, HTTP status, substrings of the server's message; the first names the field)
INVALID: list[tuple[str, str, JSON, int, tuple[str, ...]]] = [
    ("port", "v1", manifest(port=0), 422, ("spec.predictor.port", "greater than or equal to 1")),
    (
        "min-above-max",
        "v1",
        manifest(autoscaling={"minReplicas": 3, "maxReplicas": 2}),
        422,
        (
            "spec.predictor.autoscaling.minReplicas",
            "autoscaling.minReplicas must be <= autoscaling.maxReplicas",
        ),
    ),
    (
        "min-above-max-beta",
        "v1beta1",
        manifest("v1beta1", autoscaling={"minReplicas": 3, "maxReplicas": 2}),
        422,
        (
            "spec.predictor.autoscaling.minReplicas",
            "autoscaling.minReplicas must be <= autoscaling.maxReplicas",
        ),
    ),
    (
        "scale-to-zero-needs-min-0",
        "v1",
        manifest(autoscaling={"minReplicas": 1, "maxReplicas": 2, "scaleToZero": {"cooldownSeconds": 30}}),
        422,
        ("spec.predictor.autoscaling.scaleToZero", "needs autoscaling.minReplicas: 0"),
    ),
    (
        "request-above-limit",
        "v1",
        manifest(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
        422,
        ("spec.predictor.resources.requests", "must be <= its limit"),
    ),
    (
        "resource-name",
        "v1",
        manifest(resources={"limits": {"not a name!": 1}}),
        422,
        ("spec.predictor.resources.limits", "resource names must be qualified names"),
    ),
    (
        "quantity",
        "v1",
        manifest(resources={"requests": {"cpu": "lots"}}),
        422,
        ("spec.predictor.resources.requests", "spec.predictor.resources.requests.cpu", "should match"),
    ),
    ("runtime", "v1", manifest(runtime="Triton_Server"), 422, ("spec.predictor.runtime", "should match")),
    (
        "format",
        "v1",
        manifest(model={"uri": "s3://m/1", "format": "ONNX"}),
        422,
        ("spec.predictor.model.format", "should match"),
    ),
    (
        "model-uri",
        "v1beta1",
        manifest("v1beta1", model={"uri": "ftp://m/1"}),
        422,
        ("spec.predictor.model.uri", "should match"),
    ),
    (
        "cpu-target",
        "v1",
        manifest(autoscaling={"targetUtilization": {"cpu": 0}}),
        422,
        ("spec.predictor.autoscaling.targetUtilization.cpu", "greater than or equal to 1"),
    ),
    (
        "canary-percent",
        "v1",
        with_spec(manifest(), canary={"model": {"uri": "s3://m/2"}, "trafficPercent": 101}),
        422,
        ("spec.canary.trafficPercent", "less than or equal to 100"),
    ),
    (
        "error-ratio",
        "v1",
        with_spec(manifest(), monitoring={"alerts": {"errorRatio": 0}}),
        422,
        ("spec.monitoring.alerts.errorRatio", "greater than 0"),
    ),
    (
        "router",
        "v1",
        with_spec(manifest(), routing={"router": "nginx"}),
        422,
        ("spec.routing.router", "Unsupported value"),
    ),
    (
        "checksum-of-a-claim",
        "v1",
        manifest(model={"uri": "pvc://models/resnet", "sha256": "0" * 64}),
        422,
        ("spec.predictor.model.sha256", "verified on download"),
    ),
    (
        "region-of-a-gcs-candidate",
        "v1beta1",
        with_spec(manifest("v1beta1"), canary={"model": {"uri": "gs://m/2", "storage": {"region": "eu"}}}),
        422,
        ("spec.canary.model.storage.region", "for s3:// models"),
    ),
    (
        "checksum-not-hex",
        "v1",
        manifest(model={"uri": "s3://models/resnet/1", "sha256": "ABC"}),
        422,
        ("spec.predictor.model.sha256", "should match"),
    ),
    ("missing-runtime", "v1", manifest(runtime=None), 422, ("spec.predictor.runtime: Required value",)),
    (
        "v1alpha1-field-in-v1",
        "v1",
        with_spec(manifest(), modelUri="s3://m/1"),
        400,
        ('unknown field "spec.modelUri"',),
    ),
    (
        "v1-field-in-v1beta1",
        "v1beta1",
        with_spec(manifest("v1beta1"), monitoring={"enabled": True}),
        400,
        ('unknown field "spec.monitoring"',),
    ),
]
for _case in INVALID:  # manifest(runtime=None) means: without a runtime
    if _case[2]["spec"]["predictor"].get("runtime", "") is None:
        del _case[2]["spec"]["predictor"]["runtime"]


@pytest.mark.parametrize(
    ("version", "obj", "status", "expected"), [pytest.param(*case[1:], id=case[0]) for case in INVALID]
)
async def test_invalid_manifests_are_rejected_naming_the_field(
    installed: JSON,
    admin_client: Client,
    namespace: str,
    version: str,
    obj: JSON,
    status: int,
    expected: tuple[str, ...],
) -> None:
    resource = V1 if version == "v1" else BETA
    with pytest.raises(ApiError) as info:
        await create_strict(admin_client, resource, namespace, obj)
    assert info.value.status == status, info.value.message
    for text in expected:
        assert text in info.value.message, info.value.message
    # the Python side refuses it too, naming the field (the last segment of the server's path)
    field = expected[0].split(":")[0].replace('unknown field "', "").strip('"').rsplit(".", 1)[-1]
    with pytest.raises((api.ValidationError, conversion.ConversionError), match=field):
        api.decode({**obj, "metadata": {"name": "model", "namespace": namespace}})
    assert (await admin_client.list(V1, namespace))["items"] == []
