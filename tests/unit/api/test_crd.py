"""The generated CRD: structural schema, what it carries, the committed file is up to date."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import pytest
import yaml

from mlops_platform import api
from mlops_platform.api import crd, v1alpha1

ROOT = Path(__file__).resolve().parents[3]
JSON = dict[str, Any]


def nodes(schema: JSON, path: str = "") -> Iterator[tuple[str, JSON]]:
    """Every schema node with its field path (``.spec.traffic``, ``.status.conditions[]``)."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}.*")


@pytest.fixture(scope="module")
def manifest() -> JSON:
    return crd.crd_manifest()


@pytest.fixture(scope="module")
def schema(manifest: JSON) -> JSON:
    [version] = [v for v in manifest["spec"]["versions"] if v["name"] == v1alpha1.VERSION]
    out: JSON = version["schema"]["openAPIV3Schema"]
    return out


def prop(schema: JSON, path: str) -> JSON:
    node = schema
    for name in path.strip(".").split("."):
        node = node["properties"][name]
    return node


def test_the_committed_crd_is_the_generated_one() -> None:
    committed = (ROOT / crd.CRD_FILE).read_text()
    assert committed == crd.render(), "run `python -m mlops_platform.api.crd --write`"
    assert crd.main(["--check"]) == 0
    kustomization = yaml.safe_load((ROOT / "config/crd/kustomization.yaml").read_text())
    assert kustomization["resources"] == [str(crd.CRD_FILE.relative_to("config/crd"))]


def test_check_fails_with_a_diff_and_write_repairs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "crd.yaml"
    target.write_text(crd.render().replace("maximum: 65535", "maximum: 65000"))
    assert crd.main(["--check", "--path", str(target)]) == 1
    out = capsys.readouterr()
    assert "-                maximum: 65000" in out.out and "+                maximum: 65535" in out.out
    assert "out of date" in out.err
    assert crd.main(["--write", "--path", str(target)]) == 0
    assert crd.main(["--check", "--path", str(target)]) == 0
    assert crd.main(["--check", "--path", str(tmp_path / "missing.yaml")]) == 1


def test_printing_is_deterministic_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert crd.main([]) == 0
    printed = capsys.readouterr().out
    assert printed == crd.render() == crd.render()
    assert yaml.safe_load(printed) == crd.crd_manifest() == api.crd_manifest()


def test_the_schema_is_structural(schema: JSON) -> None:
    for path, node in nodes(schema):
        assert not {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "nullable"} & set(node), path
        assert node.get("additionalProperties", {}) is not False, path
        special = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        assert "type" in node or special, f"{path} has no type"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
        if "properties" in node:
            assert node["type"] == "object", path
            assert set(node.get("required", [])) <= set(node["properties"]), path
        if "default" in node:
            assert node["default"] is not None, path
    assert prop(schema, "metadata") == {"type": "object"}
    assert schema["required"] == ["spec"]


def test_every_spec_and_status_field_is_described(schema: JSON) -> None:
    for root in ("spec", "status"):
        for path, node in nodes(prop(schema, root), f".{root}"):
            assert node.get("description"), f"{path} has no description (kubectl explain shows it)"
    assert "canary" in prop(schema, "spec.traffic")["description"].lower()


def test_defaults_and_required_follow_the_struct_defaults(schema: JSON) -> None:
    for struct, path in (
        (v1alpha1.InferenceServiceSpec, "spec"),
        (v1alpha1.Traffic, "spec.traffic"),
        (v1alpha1.Resources, "spec.resources"),
    ):
        node = prop(schema, path)
        fields = msgspec.structs.fields(struct)
        assert sorted(node.get("required", [])) == sorted(f.encode_name for f in fields if f.required), path
        for f in fields:
            if not f.required and f.default is not None:
                assert node["properties"][f.encode_name]["default"] == f.default, f"{path}.{f.encode_name}"
            elif not f.required:
                assert "default" not in node["properties"][f.encode_name]
    spec = prop(schema, "spec")["properties"]
    assert {k: v.get("default") for k, v in spec.items() if "default" in v} == {
        "port": 8080,
        "minReplicas": 1,
        "maxReplicas": 1,
        "gpuPerReplica": 0,
    }


def test_constraints_are_carried_over(schema: JSON) -> None:
    spec = prop(schema, "spec")["properties"]
    assert spec["framework"]["enum"] == ["seldon", "torchserve", "triton"]
    assert spec["framework"]["type"] == "string"
    assert (spec["port"]["minimum"], spec["port"]["maximum"]) == (1, 65535)
    assert (spec["minReplicas"]["minimum"], spec["maxReplicas"]["minimum"]) == (0, 1)
    assert (spec["gpuPerReplica"]["minimum"], spec["gpuPerReplica"]["maximum"]) == (0, 16)
    assert spec["modelUri"]["pattern"] == v1alpha1.MODEL_URI_PATTERN
    assert spec["modelUri"]["maxLength"] == 2048
    traffic = spec["traffic"]["properties"]
    assert (traffic["canaryPercent"]["minimum"], traffic["canaryPercent"]["maximum"]) == (0, 100)
    # a full model URI or a version token (<= 63, checked by the rule of spec.traffic)
    assert (traffic["canaryVersion"]["minLength"], traffic["canaryVersion"]["maxLength"]) == (1, 2048)


def test_quantities_are_int_or_string_and_extensions_are_preserved(schema: JSON) -> None:
    resources = prop(schema, "spec.resources")["properties"]
    assert sorted(resources) == ["cpuLimit", "cpuRequest", "memoryLimit", "memoryRequest"]
    for name, node in resources.items():
        assert node["x-kubernetes-int-or-string"] is True, name
        assert node["pattern"] == v1alpha1.QUANTITY_PATTERN and node["minimum"] == 0, name
    extensions = prop(schema, "spec.extensions")
    assert extensions == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": extensions["description"],
    }


def test_cel_rules_name_the_fields(schema: JSON) -> None:
    spec_rules = prop(schema, "spec")["x-kubernetes-validations"]
    assert [r["rule"] for r in spec_rules] == [r["rule"] for r in v1alpha1.SPEC_RULES]
    assert [r["fieldPath"] for r in spec_rules] == [
        ".minReplicas",
        ".traffic.canaryVersion",
        ".traffic.canaryVersion",
    ]
    assert [r["message"].split(" ", 1)[0].rstrip(":") for r in spec_rules] == [
        "spec.minReplicas",
        "spec.traffic.canaryVersion",
        "spec.traffic.canaryVersion",
    ]
    traffic_rules = prop(schema, "spec.traffic")["x-kubernetes-validations"]
    assert [r["fieldPath"] for r in traffic_rules] == [".canaryVersion"]
    resource_rules = prop(schema, "spec.resources")["x-kubernetes-validations"]
    assert [r["fieldPath"] for r in resource_rules] == [".cpuRequest", ".memoryRequest"]


def test_status_conditions_are_metav1_conditions_keyed_by_type(schema: JSON) -> None:
    conditions = prop(schema, "status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert sorted(item["properties"]) == sorted(
        ["type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"]
    )
    assert set(item["required"]) >= {"type", "status"}
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert "default" not in item["properties"]["lastTransitionTime"]  # "" is not a date-time
    status = prop(schema, "status")["properties"]
    assert {"replicas", "readyReplicas", "replicasSummary", "url", "selector", "activeVersion"} <= set(status)


def test_crd_names_scope_subresources_and_columns(manifest: JSON) -> None:
    spec = manifest["spec"]
    assert manifest["metadata"]["name"] == crd.CRD_NAME == "inferenceservices.mlops.platform"
    assert spec["group"] == "mlops.platform" and spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "InferenceService",
        "listKind": "InferenceServiceList",
        "plural": "inferenceservices",
        "singular": "inferenceservice",
        "shortNames": ["isvc"],
        "categories": ["mlops", "all"],
    }
    served = {v["name"]: (v["served"], v["storage"]) for v in spec["versions"]}
    assert served == {"v1alpha1": (True, False), "v1beta1": (True, False), "v1": (True, True)}
    paths = {v["name"]: v["subresources"]["scale"]["specReplicasPath"] for v in spec["versions"]}
    assert paths == {
        "v1alpha1": ".spec.minReplicas",
        "v1beta1": ".spec.predictor.autoscaling.minReplicas",
        "v1": ".spec.predictor.autoscaling.minReplicas",
    }
    for version in spec["versions"]:
        assert version["subresources"]["status"] == {}
        assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"
        columns = {c["name"]: (c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]}
        first = "Framework" if version["name"] == "v1alpha1" else "Runtime"
        assert list(columns) == [first, "URL", "Ready", "Reason", "Replicas", "Age"]
        assert columns["Reason"] == ("string", '.status.conditions[?(@.type=="Ready")].reason')
        assert columns["Replicas"] == ("string", ".status.replicasSummary")
        assert columns["Age"] == ("date", ".metadata.creationTimestamp")
    [alpha] = [v for v in spec["versions"] if v["name"] == "v1alpha1"]
    assert alpha["deprecated"] is True and "mlops.platform/v1" in alpha["deprecationWarning"]
    assert spec["conversion"]["strategy"] == "Webhook"
    assert spec["conversion"]["webhook"]["conversionReviewVersions"] == ["v1"]
    assert spec["conversion"]["webhook"]["clientConfig"]["service"]["path"] == "/convert"
    local = crd.crd_manifest(webhook_url="https://127.0.0.1:9443/convert")
    assert local["spec"]["conversion"]["webhook"]["clientConfig"] == {"url": "https://127.0.0.1:9443/convert"}
    assert api.RESOURCE == crd.RESOURCE
    assert api.RESOURCE.path("ns", "m") == "/apis/mlops.platform/v1/namespaces/ns/inferenceservices/m"


def test_more_versions_can_be_added() -> None:
    beta = crd.Version("v1beta1", v1alpha1.InferenceService, storage=True)
    alpha = dataclasses.replace(crd.VERSIONS[0], storage=False, deprecation_warning="use v1beta1")
    two = crd.crd_manifest((alpha, beta))["spec"]["versions"]
    assert [(v["name"], v["storage"], v.get("deprecated")) for v in two] == [
        ("v1alpha1", False, True),
        ("v1beta1", True, None),
    ]
    with pytest.raises(ValueError, match="exactly one"):
        crd.crd_manifest((alpha,))


def test_a_crd_of_the_storage_version_alone_needs_no_conversion() -> None:
    # what the benchmarks install: the API server keeps no cache of another version to convert into
    storage = tuple(v for v in crd.VERSIONS if v.storage)
    spec = crd.crd_manifest(storage, webhook_url="https://127.0.0.1:9/convert")["spec"]
    assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [("v1", True, True)]
    assert "conversion" not in spec


class _Leaf(msgspec.Struct):
    """A leaf."""

    labels: dict[str, str] = {}
    blob: dict[str, Any] = {}
    kind: Literal["a", "b"] = "a"


class _Good(msgspec.Struct):
    leaf: _Leaf | None = None


class _Floaty(msgspec.Struct):
    x: int | float = 0


class _Mixed(msgspec.Struct):
    x: Literal["a", 1] = "a"


class _Tuple(msgspec.Struct):
    x: tuple[int, str] = (1, "a")


class _Bounded(msgspec.Struct):
    x: Annotated[float, msgspec.Meta(gt=0)] = 1.0


def test_the_converter_handles_maps_and_refuses_what_kubernetes_cannot_express() -> None:
    leaf = crd.structural_schema(_Good)["properties"]["leaf"]
    assert leaf["description"] == "A leaf."
    assert leaf["properties"]["labels"] == {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "default": {},
    }
    assert leaf["properties"]["blob"]["x-kubernetes-preserve-unknown-fields"] is True
    assert leaf["properties"]["kind"] == {"type": "string", "enum": ["a", "b"], "default": "a"}
    with pytest.raises(TypeError, match="not structural"):
        crd.structural_schema(_Floaty)
    with pytest.raises(TypeError, match="mixed"):
        crd.structural_schema(_Mixed)
    with pytest.raises(TypeError, match="no CRD equivalent"):
        crd.structural_schema(_Tuple)
    bounded = crd.structural_schema(_Bounded)["properties"]["x"]
    assert (bounded["minimum"], bounded["exclusiveMinimum"]) == (0, True)  # OpenAPI v3.0 form
