"""InferenceService v1alpha1 types: decoding, defaults, every constraint, errors naming the field."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlops_platform import api
from mlops_platform.api import isvc_status, v1alpha1
from mlops_platform.api.v1alpha1 import ValidationError, from_dict
from mlops_platform.runtime import quantity


def manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": v1alpha1.API_VERSION,
        "kind": v1alpha1.KIND,
        "metadata": {"name": "m", "namespace": "ns", "uid": "u-1", "generation": 3},
        "spec": {"modelUri": "s3://bucket/model/1", "framework": "triton", **spec},
    }


def without(obj: dict[str, Any], *path: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    target = out
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return out


def test_minimal_manifest_gets_the_defaults() -> None:
    isvc = from_dict(manifest())
    s = isvc.spec
    assert (s.port, s.min_replicas, s.max_replicas, s.gpu_per_replica) == (8080, 1, 1, 0)
    assert (s.resources, s.traffic, s.extensions) == (None, None, None)
    assert isvc.status == isvc_status.InferenceServiceStatus()
    assert (isvc.name, isvc.namespace, isvc.uid, isvc.generation) == ("m", "ns", "u-1", 3)
    assert v1alpha1.Traffic().canary_percent == 0


def test_full_manifest_round_trips() -> None:
    full = manifest(
        port=9000,
        minReplicas=0,
        maxReplicas=5,
        gpuPerReplica=2,
        resources={"cpuRequest": "500m", "cpuLimit": "2", "memoryRequest": "1Gi", "memoryLimit": "4Gi"},
        traffic={"canaryVersion": "v2", "canaryPercent": 10},
        extensions={"anything": {"nested": [1, "two"]}},
    )
    full["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "CrashLoopBackOff",
                "message": "pod m-0 restarts",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 3,
            }
        ],
        "replicas": 2,
        "readyReplicas": 1,
        "replicasSummary": "1/2",
        "url": "http://m.ns.svc.cluster.local",
        "selector": "app=m",
    }
    isvc = from_dict(full)
    assert isvc.spec.traffic == v1alpha1.Traffic(canary_version="v2", canary_percent=10)
    assert isvc.status.conditions[0].reason == "CrashLoopBackOff"
    # nothing lost: encoding gives the manifest back (apiVersion and kind are defaults: omitted)
    assert msgspec.to_builtins(isvc) == without(without(full, "apiVersion"), "kind")


def test_quantities_accept_integers_and_normalise_them_to_strings() -> None:
    isvc = from_dict(manifest(resources={"cpuRequest": 1, "cpuLimit": 2, "memoryLimit": "3Gi"}))
    assert isvc.spec.resources == v1alpha1.Resources(cpu_request="1", cpu_limit="2", memory_limit="3Gi")
    assert v1alpha1.Resources(memory_request=5).memory_request == "5"
    assert msgspec.to_builtins(isvc.spec.resources) == {
        "cpuRequest": "1",
        "cpuLimit": "2",
        "memoryLimit": "3Gi",
    }


VALID = manifest()
#: (id, manifest, the field the error must name)
INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("port-zero", manifest(port=0), "`spec.port`"),
    ("port-too-big", manifest(port=65536), "`spec.port`"),
    ("port-string", manifest(port="8080"), "`spec.port`"),
    ("port-bool", manifest(port=True), "`spec.port`"),
    ("framework-unknown", manifest(framework="tensorflow"), "`spec.framework`"),
    ("model-uri-scheme", manifest(modelUri="ftp://host/model"), "`spec.modelUri`"),
    ("model-uri-empty-path", manifest(modelUri="s3://"), "`spec.modelUri`"),
    ("model-uri-too-long", manifest(modelUri="s3://" + "a" * 2044), "`spec.modelUri`"),
    ("min-replicas-negative", manifest(minReplicas=-1), "`spec.minReplicas`"),
    ("min-replicas-too-big", manifest(minReplicas=1001, maxReplicas=1000), "`spec.minReplicas`"),
    ("max-replicas-zero", manifest(minReplicas=0, maxReplicas=0), "`spec.maxReplicas`"),
    ("max-replicas-too-big", manifest(maxReplicas=1001), "`spec.maxReplicas`"),
    ("gpu-negative", manifest(gpuPerReplica=-1), "`spec.gpuPerReplica`"),
    ("gpu-too-many", manifest(gpuPerReplica=17), "`spec.gpuPerReplica`"),
    ("canary-percent-negative", manifest(traffic={"canaryPercent": -1}), "`spec.traffic.canaryPercent`"),
    ("canary-percent-over-100", manifest(traffic={"canaryPercent": 101}), "`spec.traffic.canaryPercent`"),
    ("canary-version-empty", manifest(traffic={"canaryVersion": ""}), "`spec.traffic.canaryVersion`"),
    ("canary-version-long", manifest(traffic={"canaryVersion": "v" * 2049}), "`spec.traffic.canaryVersion`"),
    ("traffic-not-object", manifest(traffic="50/50"), "`spec.traffic`"),
    ("cpu-request-garbage", manifest(resources={"cpuRequest": "lots"}), "`spec.resources.cpuRequest`"),
    ("cpu-request-negative-int", manifest(resources={"cpuRequest": -1}), "`spec.resources.cpuRequest`"),
    ("cpu-limit-negative", manifest(resources={"cpuLimit": "-1"}), "`spec.resources.cpuLimit`"),
    ("memory-fraction-exp", manifest(resources={"memoryLimit": "1e1.5"}), "`spec.resources.memoryLimit`"),
    ("memory-request-float", manifest(resources={"memoryRequest": 1.5}), "`spec.resources.memoryRequest`"),
    ("extensions-list", manifest(extensions=[1]), "`spec.extensions`"),
    ("unknown-spec-field", manifest(replicas=3), "unknown field `replicas` - at `spec`"),
    ("unknown-traffic-field", manifest(traffic={"weight": 3}), "unknown field `weight` - at `spec.traffic`"),
    ("missing-model-uri", without(VALID, "spec", "modelUri"), "`modelUri` - at `spec`"),
    ("missing-framework", without(VALID, "spec", "framework"), "`framework` - at `spec`"),
    ("missing-spec", without(VALID, "spec"), "required field `spec`"),
    (
        "condition-bad-status",
        {**VALID, "status": {"conditions": [{"type": "Ready", "status": "Maybe", "reason": "X"}]}},
        "`status.conditions[0].status`",
    ),
    (
        "min-above-max",
        manifest(minReplicas=3, maxReplicas=2),
        "spec.minReplicas (3) must be <= spec.maxReplicas",
    ),
    (
        "canary-without-version",
        manifest(traffic={"canaryPercent": 10}),
        "spec.traffic.canaryVersion is required",
    ),
    ("canary-token-long", manifest(traffic={"canaryVersion": "v" * 64}), "spec.traffic.canaryVersion"),
    ("canary-token-slash", manifest(traffic={"canaryVersion": "a/b"}), "spec.traffic.canaryVersion"),
    ("canary-uri-scheme", manifest(traffic={"canaryVersion": "ftp://h/m"}), "spec.traffic.canaryVersion"),
    (
        "canary-token-without-a-path-to-replace",
        manifest(modelUri="s3://bucket", traffic={"canaryVersion": "8"}),
        "spec.traffic.canaryVersion '8': a version token replaces the last path segment of spec.modelUri",
    ),
    (
        "cpu-request-above-limit",
        manifest(resources={"cpuRequest": "1500m", "cpuLimit": 1}),
        "spec.resources.cpuRequest (1500m) must be <= spec.resources.cpuLimit (1)",
    ),
    (
        "memory-request-above-limit",
        manifest(resources={"memoryRequest": "1Gi", "memoryLimit": "1G"}),
        "spec.resources.memoryRequest (1Gi) must be <= spec.resources.memoryLimit (1G)",
    ),
]


@pytest.mark.parametrize(("obj", "field"), [pytest.param(o, f, id=i) for i, o, f in INVALID])
def test_invalid_manifests_are_rejected_naming_the_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        from_dict(obj)
    assert field in str(info.value)


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"minReplicas": 0, "maxReplicas": 1}, id="scale-to-zero"),
        pytest.param({"minReplicas": 1000, "maxReplicas": 1000}, id="max-bounds"),
        pytest.param({"port": 1}, id="lowest-port"),
        pytest.param({"port": 65535}, id="highest-port"),
        pytest.param({"traffic": {"canaryPercent": 0}}, id="no-canary"),
        pytest.param({"traffic": {"canaryVersion": "v2"}}, id="canary-staged-at-0"),
        pytest.param({"traffic": {"canaryVersion": "v2", "canaryPercent": 100}}, id="canary-100"),
        pytest.param({"resources": {"cpuRequest": "1", "cpuLimit": "1000m"}}, id="request-equals-limit"),
        pytest.param({"resources": {"cpuRequest": "500m", "cpuLimit": 1}}, id="milli-below-int"),
        pytest.param({"resources": {"memoryRequest": "1G", "memoryLimit": "1Gi"}}, id="G-below-Gi"),
        pytest.param({"resources": {"cpuRequest": 4}}, id="request-without-limit"),
        pytest.param({"gpuPerReplica": 16, "framework": "torchserve"}, id="gpu-max"),
        pytest.param({"modelUri": "pvc://claim/path", "framework": "seldon"}, id="pvc-seldon"),
    ],
)
def test_valid_edge_cases_are_accepted(spec: dict[str, Any]) -> None:
    assert from_dict(manifest(**spec)).spec.port in (1, 65535, 8080)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        (3, Decimal(3)),
        ("1Ki", Decimal(1024)),
        ("1.5Gi", Decimal(1536 * 1024**2)),
        ("1G", Decimal(10**9)),
        ("100n", Decimal("1e-7")),
        ("250u", Decimal("0.00025")),
        ("1e3", Decimal(1000)),
        ("5E-3", Decimal("0.005")),
        (".5", Decimal("0.5")),
        ("+2k", Decimal(2000)),
        ("1E", Decimal(10**18)),
        ("1Ei", Decimal(2**60)),
    ],
)
def test_parse_quantity(text: str | int, value: Decimal) -> None:
    assert quantity.parse(text) == value


@pytest.mark.parametrize("text", ["", "-1", "1.2.3", "1KB", "Gi", "1e1.5", "1 Gi", "0x10"])
def test_parse_quantity_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        quantity.parse(text)


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(["m", "", "k", "Ki", "Mi"]))
def test_quantity_order_follows_the_suffix_scale(n: int, suffix: str) -> None:
    assert quantity.parse(f"{n}{suffix}") <= quantity.parse(f"{n + 1}{suffix}")
    assert quantity.parse(f"{n}m") * 1000 == quantity.parse(n)


def test_the_cel_rules_and_python_rules_name_the_same_fields() -> None:
    messages = [r["message"] for r in v1alpha1.SPEC_RULES + v1alpha1.TRAFFIC_RULES + v1alpha1.RESOURCES_RULES]
    assert [m.split(" ", 1)[0].rstrip(":") for m in messages] == [
        "spec.minReplicas",
        "spec.traffic.canaryVersion",
        "spec.traffic.canaryVersion",
        "spec.traffic.canaryVersion",
        "spec.resources.cpuRequest",
        "spec.resources.memoryRequest",
    ]
    python_messages = {i: f for i, _, f in INVALID}
    for id_ in (
        "min-above-max",
        "canary-without-version",
        "canary-token-slash",
        "canary-token-without-a-path-to-replace",
        "cpu-request-above-limit",
        "memory-request-above-limit",
    ):
        field = python_messages[id_].split(" ", 1)[0]
        assert any(m.startswith(field) for m in messages), field


@pytest.mark.parametrize(
    "name", ["1model", "my.model", "Model", "m" * 54], ids=["digit", "dot", "upper", "long"]
)
def test_names_that_cannot_name_children_are_rejected(name: str) -> None:
    with pytest.raises(ValidationError, match=r"metadata\.name"):
        from_dict({"metadata": {"name": name}, "spec": {"modelUri": "s3://m/1", "framework": "triton"}})


@pytest.mark.parametrize(
    ("model_uri", "version", "candidate"),
    [
        ("gs://models/bert/7", "8", "gs://models/bert/8"),
        ("s3://bucket/model/1", "v2", "s3://bucket/model/v2"),
        ("s3://bucket/model/1/", "2", "s3://bucket/model/2/"),  # a trailing slash is kept
        ("file:///mnt/models", "v9", "file:///mnt/v9"),
        ("pvc://claim/path/v1", "v1.1-rc_2", "pvc://claim/path/v1.1-rc_2"),
        ("s3://bucket", "gs://elsewhere/bert/8", "gs://elsewhere/bert/8"),  # a full URI is itself
        ("gs://models/bert/7", "gs://models/bert/7", "gs://models/bert/7"),  # the stable one: allowed
    ],
)
def test_the_canary_version_resolves_to_the_candidates_model_uri(
    model_uri: str, version: str, candidate: str
) -> None:
    assert v1alpha1.resolve_canary(model_uri, version) == candidate
    isvc = api.decode(manifest(modelUri=model_uri, traffic={"canaryVersion": version}))  # through v1
    assert isvc.traffic is not None and isvc.traffic.model_uri == candidate
