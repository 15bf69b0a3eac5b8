"""The generated InferenceService CRD on a real kube-apiserver: defaults, validation, explain, scale, columns.

The CRD is cluster-scoped and shared by the session: it is installed idempotently (server-side
apply) and left installed. Every test works in its own namespace.
"""

from __future__ import annotations

from typing import Any

import pytest

from mlops_platform.api import crd, v1alpha1
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport.client import JSON, ApiError, Client
from mlops_platform.testing import isvc, plugin, wait, webhook

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request goes through the conversion webhook
Kubectl = plugin.Kubectl


def manifest(name: str = "model", **spec: Any) -> JSON:
    return isvc.manifest(name, **{"modelUri": "s3://models/resnet/1", "framework": "torchserve", **spec})


async def create_strict(client: Client, namespace: str, obj: JSON) -> JSON:
    """POST with ``fieldValidation=Strict``: unknown and duplicate fields are errors, not warnings."""
    return await client.request(
        "POST", ISVC.path(namespace), params={"fieldValidation": "Strict"}, body=obj, resource="isvc"
    )


async def test_install_is_idempotent_and_the_server_keeps_the_schema(
    installed: JSON, admin_client: Client
) -> None:
    conditions = {c["type"]: c["status"] for c in installed["status"]["conditions"]}
    assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
    again = await webhook.install_crd(admin_client)
    assert again["metadata"]["generation"] == installed["metadata"]["generation"]  # the spec did not change
    ours = {v["name"]: v for v in crd.crd_manifest()["spec"]["versions"]}
    for served in again["spec"]["versions"]:
        assert served["schema"] == ours[served["name"]]["schema"]
        assert served["subresources"] == ours[served["name"]]["subresources"]
    assert again["spec"]["conversion"]["strategy"] == "Webhook"
    assert again["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]  # injected by the webhook
    assert again["status"]["acceptedNames"]["shortNames"] == ["isvc"]


async def test_a_valid_manifest_is_accepted_and_defaulted(
    installed: JSON, admin_client: Client, namespace: str
) -> None:
    obj = manifest(
        traffic={},
        resources={"cpuRequest": 1, "cpuLimit": "1500m", "memoryLimit": "2Gi"},
        extensions={"future": {"knob": [1, "two"]}},
    )
    created = await create_strict(admin_client, namespace, obj)
    spec = created["spec"]
    assert {k: spec[k] for k in ("port", "minReplicas", "maxReplicas", "gpuPerReplica")} == {
        "port": 8080,
        "minReplicas": 1,
        "maxReplicas": 1,
        "gpuPerReplica": 0,
    }
    assert spec["traffic"] == {"canaryPercent": 0}
    assert spec["resources"] == {"cpuRequest": 1, "cpuLimit": "1500m", "memoryLimit": "2Gi"}
    assert spec["extensions"] == {"future": {"knob": [1, "two"]}}
    served = v1alpha1.from_dict(await admin_client.get(ISVC, "model", namespace))
    assert served.spec.resources == v1alpha1.Resources(cpu_request="1", cpu_limit="1500m", memory_limit="2Gi")
    assert (served.namespace, served.generation) == (namespace, 1)


VALID = manifest()
# (id, object, expected HTTP status, substrings of the server's message; the first names the field)
INVALID: list[tuple[str, JSON, int, tuple[str, ...]]] = [
    ("port-zero", manifest(port=0), 422, ("spec.port", "greater than or equal to 1")),
    ("port-too-big", manifest(port=65536), 422, ("spec.port", "less than or equal to 65535")),
    ("port-string", manifest(port="8080"), 422, ("spec.port", "must be of type integer")),
    (
        "framework-unknown",
        manifest(framework="tensorflow"),
        422,
        ("spec.framework", 'Unsupported value: "tensorflow"'),
    ),
    ("model-uri-scheme", manifest(modelUri="ftp://host/m"), 422, ("spec.modelUri", "should match")),
    ("model-uri-too-long", manifest(modelUri="s3://" + "a" * 2044), 422, ("spec.modelUri", "Too long")),
    ("missing-model-uri", isvc.without(VALID, "spec", "modelUri"), 422, ("spec.modelUri: Required value",)),
    ("missing-framework", isvc.without(VALID, "spec", "framework"), 422, ("spec.framework: Required value",)),
    ("missing-spec", isvc.without(VALID, "spec"), 422, ("spec: Required value",)),
    (
        "min-replicas-negative",
        manifest(minReplicas=-1),
        422,
        ("spec.minReplicas", "greater than or equal to 0"),
    ),
    (
        "max-replicas-zero",
        manifest(minReplicas=0, maxReplicas=0),
        422,
        ("spec.maxReplicas", "greater than or equal to 1"),
    ),
    (
        "max-replicas-too-big",
        manifest(maxReplicas=1001),
        422,
        ("spec.maxReplicas", "less than or equal to 1000"),
    ),
    (
        "min-above-max",
        manifest(minReplicas=3, maxReplicas=2),
        422,
        ("spec.minReplicas", "spec.minReplicas must be <= spec.maxReplicas"),
    ),
    ("gpu-negative", manifest(gpuPerReplica=-1), 422, ("spec.gpuPerReplica", "greater than or equal to 0")),
    ("gpu-too-many", manifest(gpuPerReplica=17), 422, ("spec.gpuPerReplica", "less than or equal to 16")),
    (
        "canary-percent-over-100",
        manifest(traffic={"canaryPercent": 101}),
        422,
        ("spec.traffic.canaryPercent", "less than or equal to 100"),
    ),
    (
        "canary-without-version",
        manifest(traffic={"canaryPercent": 10}),
        422,
        (
            "spec.traffic.canaryVersion: Required value",
            "spec.traffic.canaryVersion is required when canaryPercent > 0",
        ),
    ),
    (
        "canary-version-empty",
        manifest(traffic={"canaryVersion": "", "canaryPercent": 5}),
        422,
        ("spec.traffic.canaryVersion", "at least 1"),
    ),
    ("traffic-not-object", manifest(traffic="50/50"), 422, ("spec.traffic", "must be of type object")),
    (
        "canary-token-with-a-slash",
        manifest(traffic={"canaryVersion": "a/b", "canaryPercent": 5}),
        422,
        ("spec.traffic.canaryVersion", "a full model URI (s3://"),
    ),
    (
        "canary-uri-scheme",
        manifest(traffic={"canaryVersion": "ftp://host/m"}),
        422,
        ("spec.traffic.canaryVersion", "a full model URI (s3://"),
    ),
    (
        "canary-token-without-a-path-to-replace",
        manifest(modelUri="s3://bucket", traffic={"canaryVersion": "8", "canaryPercent": 5}),
        422,
        ("spec.traffic.canaryVersion", "replaces the last path segment of spec.modelUri, which has none"),
    ),
    (
        "cpu-request-garbage",
        manifest(resources={"cpuRequest": "lots"}),
        422,
        ("spec.resources.cpuRequest", "should match"),
    ),
    (
        "cpu-request-negative",
        manifest(resources={"cpuRequest": -1}),
        422,
        ("spec.resources.cpuRequest", "greater than or equal to 0"),
    ),
    (
        "cpu-request-above-limit",
        manifest(resources={"cpuRequest": "1500m", "cpuLimit": 1}),
        422,
        ("spec.resources.cpuRequest", "spec.resources.cpuRequest must be <= spec.resources.cpuLimit"),
    ),
    (
        "memory-request-above-limit",
        manifest(resources={"memoryRequest": "1Gi", "memoryLimit": "1G"}),
        422,
        (
            "spec.resources.memoryRequest",
            "spec.resources.memoryRequest must be <= spec.resources.memoryLimit",
        ),
    ),
    (
        "memory-request-float",
        manifest(resources={"memoryRequest": 1.5}),
        422,
        ("spec.resources.memoryRequest", "integer,string"),
    ),
    ("extensions-list", manifest(extensions=[1]), 422, ("spec.extensions", "must be of type object")),
    ("unknown-spec-field", manifest(replicas=3), 400, ('unknown field "spec.replicas"',)),
    (
        "unknown-traffic-field",
        manifest(traffic={"weight": 50}),
        400,
        ('unknown field "spec.traffic.weight"',),
    ),
]


@pytest.mark.parametrize(
    ("obj", "status", "expected"), [pytest.param(*case[1:], id=case[0]) for case in INVALID]
)
async def test_invalid_manifests_are_rejected_naming_the_field(
    installed: JSON, admin_client: Client, namespace: str, obj: JSON, status: int, expected: tuple[str, ...]
) -> None:
    with pytest.raises(ApiError) as info:
        await create_strict(admin_client, namespace, obj)
    assert info.value.status == status, info.value.message
    for text in expected:
        assert text in info.value.message
    # the Python types reject it too, naming the same field (the last segment of the server's path)
    field = expected[0].split(":")[0].replace('unknown field "', "").strip('"').rsplit(".", 1)[-1]
    with pytest.raises(v1alpha1.ValidationError, match=field):
        v1alpha1.from_dict(obj)
    assert (await admin_client.list(ISVC, namespace))["items"] == []


async def test_kubectl_explain_shows_the_descriptions(installed: JSON, kubectl: Kubectl) -> None:
    async def explain() -> str:
        rc, out, _ = await kubectl(
            "explain", "inferenceservices.spec.traffic", "--api-version=mlops.platform/v1alpha1"
        )
        return out if rc == 0 and "canaryPercent" in out else ""

    out = await wait.until(explain, timeout=60, what="OpenAPI v3 published for the CRD")
    assert "Canary traffic split between the active model version and a canary version." in out
    assert "Percent of requests (0-100) routed to canaryVersion." in out
    assert "The candidate model that gets canaryPercent of the traffic" in out
    rc, out, _ = await kubectl(
        "explain", "isvc.spec.resources.cpuRequest", "--api-version=mlops.platform/v1alpha1"
    )
    assert rc == 0 and "CPU request per replica" in out


async def test_scale_subresource_sets_min_replicas_within_max(
    installed: JSON, admin_client: Client, namespace: str, kubectl: Kubectl
) -> None:
    await admin_client.create(ISVC, manifest(minReplicas=1, maxReplicas=5), namespace)
    status = {"status": {"replicas": 2, "selector": "app.kubernetes.io/instance=model"}}
    await admin_client.patch(ISVC, "model", status, namespace=namespace, subresource="status")

    rc, _, err = await kubectl("scale", "-n", namespace, "isvc", "model", "--replicas=3")
    assert rc == 0, err
    assert (await admin_client.get(ISVC, "model", namespace))["spec"]["minReplicas"] == 3
    scale = await admin_client.request("GET", ISVC.path(namespace, "model", "scale"))
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    assert scale["status"] == {"replicas": 2, "selector": "app.kubernetes.io/instance=model"}

    with pytest.raises(ApiError) as info:  # beyond maxReplicas: the CEL rule holds on /scale too
        await admin_client.patch(
            ISVC, "model", {"spec": {"replicas": 9}}, namespace=namespace, subresource="scale"
        )
    assert info.value.status == 422
    assert "spec.minReplicas must be <= spec.maxReplicas" in info.value.message
    assert (await admin_client.get(ISVC, "model", namespace))["spec"]["minReplicas"] == 3


async def test_status_subresource_and_printer_columns(
    installed: JSON, admin_client: Client, namespace: str, kubectl: Kubectl
) -> None:
    created = await admin_client.create(ISVC, manifest(), namespace)
    ready = {
        "type": "Ready",
        "status": "False",
        "reason": "CrashLoopBackOff",
        "message": "container predictor restarts",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    status = {"conditions": [ready], "url": "http://model.ns.svc", "replicasSummary": "0/1"}
    updated = await admin_client.patch(
        ISVC, "model", {"status": status}, namespace=namespace, subresource="status"
    )
    assert updated["metadata"]["generation"] == created["metadata"]["generation"]  # status is not spec
    assert updated["status"]["replicas"] == 0  # defaulted by the schema

    bad = {"status": {"conditions": [{**ready, "status": "Maybe"}]}}
    with pytest.raises(ApiError) as info:
        await admin_client.patch(ISVC, "model", bad, namespace=namespace, subresource="status")
    assert 'status.conditions[0].status: Unsupported value: "Maybe"' in info.value.message

    rc, out, err = await kubectl("get", "inferenceservices.v1alpha1.mlops.platform", "-n", namespace)
    assert rc == 0, err
    header, row = (line.split() for line in out.strip().splitlines())
    assert header == ["NAME", "FRAMEWORK", "URL", "READY", "REASON", "REPLICAS", "AGE"]
    assert row[:6] == ["model", "torchserve", "http://model.ns.svc", "False", "CrashLoopBackOff", "0/1"]


async def test_short_name_and_categories(
    installed: JSON, admin_client: Client, namespace: str, kubectl: Kubectl
) -> None:
    await admin_client.create(ISVC, manifest("a"), namespace)
    await admin_client.create(ISVC, manifest("b", framework="triton"), namespace)
    for what in ("isvc", "inferenceservice", "inferenceservices.mlops.platform", "mlops"):
        rc, out, err = await kubectl("get", what, "-n", namespace, "-o", "name")
        assert rc == 0, err
        assert out.split() == ["inferenceservice.mlops.platform/a", "inferenceservice.mlops.platform/b"], what
    rc, out, err = await kubectl("get", "all", "-n", namespace, "-o", "name")
    assert rc == 0 and "inferenceservice.mlops.platform/a" in out.split(), err
    rc, out, err = await kubectl("delete", "isvc", "a", "-n", namespace, "--wait=false")
    assert rc == 0, err
    names = [i["metadata"]["name"] for i in (await admin_client.list(ISVC, namespace))["items"]]
    assert names == ["b"]  # no finalizer: deleted at once


async def test_the_crd_is_cluster_scoped(installed: JSON, admin_client: Client) -> None:
    live = await admin_client.get(resources.CRD, crd.CRD_NAME)
    assert "namespace" not in live["metadata"]
    assert live["spec"]["scope"] == "Namespaced"
    res = await admin_client.resource_for(v1alpha1.API_VERSION, v1alpha1.KIND)
    assert res == ISVC


async def test_names_longer_than_53_characters_are_rejected(admin_client: Client, namespace: str) -> None:
    """Children are named <name>-predictor and carry the name in label values (63 characters max)."""
    await webhook.install_crd(admin_client)
    body = isvc.manifest("n" * 54, modelUri="s3://m/1", framework="triton")
    with pytest.raises(ApiError) as e:
        await admin_client.create(ISVC, body, namespace)
    assert e.value.status == 422
    assert "metadata.name" in e.value.message
    for bad in ("1model", "my.model", "Model"):  # the Service <name>-predictor must be a DNS-1035 label
        body["metadata"]["name"] = bad
        with pytest.raises(ApiError) as e:
            await admin_client.create(ISVC, body, namespace)
        assert e.value.status == 422, bad
        assert "metadata.name" in e.value.message, bad
    body["metadata"]["name"] = "n" * 53
    await admin_client.create(ISVC, body, namespace)
