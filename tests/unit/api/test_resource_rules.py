"""Rules the API server lacked, found by the reliability suite's hostile-input scenario (objects it
stored that the operator could not serve):

- an extended resource (``nvidia.com/gpu``, ``example.com/fpga``) requested below its limit, or
  without one, or in fractions: Kubernetes refuses such a Deployment, so the operator failed every
  reconcile (``Ready=False/ReconcileFailed`` for ever); now the schema refuses the InferenceService,
  naming ``spec.predictor.resources``, and the operator reports an already stored one as InvalidSpec;
- ``model.sha256`` of a model URI naming a directory (``s3://bucket``, ``gs://b/models/``): only the
  operator refused it (InvalidSpec); now the schema does too (:data:`v1_rules.DIRECTORY_URI_RE2`, checked
  here against :attr:`modeluri.ModelURI.is_prefix`)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlops_platform import api
from mlops_platform.api import crd, modeluri, v1, v1_rules

JSON = dict[str, Any]


def hub(resources: JSON | None = None, **model: Any) -> JSON:
    predictor: JSON = {"model": {"uri": "s3://models/iris/1", **model}, "runtime": "triton"}
    if resources is not None:
        predictor["resources"] = resources
    return {
        "apiVersion": v1.API_VERSION,
        "kind": v1.KIND,
        "metadata": {"name": "iris", "namespace": "ml"},
        "spec": {"predictor": predictor},
    }


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}, "does not overcommit"),
        ({"requests": {"example.com/fpga": 1}}, "does not overcommit"),
        ({"requests": {"hugepages-2Mi": "2Mi"}}, "does not overcommit"),
        ({"limits": {"nvidia.com/gpu": "500m"}}, "whole units"),
        ({"requests": {"example.com/fpga": "1.5"}, "limits": {"example.com/fpga": "1.5"}}, "whole units"),
    ],
)
def test_extended_resources_are_whole_and_never_overcommitted(resources: JSON, message: str) -> None:
    with pytest.raises(api.ValidationError, match=rf"spec\.predictor\.resources\..*{message}"):
        api.decode(hub(resources))


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": "2"}},
        {"limits": {"nvidia.com/gpu": 1}},
        {"requests": {"cpu": "500m", "kubernetes.io/foo": "1m"}, "limits": {"cpu": 1}},
        {"requests": {"hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "2Mi"}},
    ],
)
def test_what_kubernetes_accepts_is_accepted(resources: JSON) -> None:
    api.decode(hub(resources))


def test_the_rules_are_in_the_schema() -> None:
    schema = next(
        v["schema"]["openAPIV3Schema"] for v in crd.crd_manifest()["spec"]["versions"] if v["name"] == "v1"
    )
    predictor = schema["properties"]["spec"]["properties"]["predictor"]
    resources = predictor["properties"]["resources"]
    assert [r["message"] for r in resources["x-kubernetes-validations"]] == [
        r["message"] for r in v1_rules.RESOURCES_RULES
    ]
    assert any("overcommit" in r["message"] for r in v1_rules.RESOURCES_RULES)
    for part in ("requests", "limits"):
        rules = resources["properties"][part]["x-kubernetes-validations"]
        assert any("whole units" in r["message"] for r in rules)
    model = predictor["properties"]["model"]["x-kubernetes-validations"]
    assert any(v1_rules.DIRECTORY_URI_RE2 in r["rule"] for r in model)


@pytest.mark.parametrize(
    "uri", ["s3://bucket", "s3://bucket/", "gs://b/models/", "https://h/m/", "http://h/a/#x"]
)
def test_a_checksum_of_a_directory_is_refused(uri: str) -> None:
    with pytest.raises(api.ValidationError, match=r"spec\.predictor\.model\.sha256"):
        api.decode(hub(sha256="0" * 64, uri=uri))


_DIRECTORY = re.compile(v1_rules.DIRECTORY_URI_RE2.replace("$", r"\Z"))
_PARTS = st.sampled_from(["a", "b", "/", "?", "#", "x.tar", "."])


@settings(max_examples=2000, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["s3://bucket", "gs://b", "https://h", "http://h"]), st.lists(_PARTS, max_size=6))
def test_the_directory_rule_is_the_parsers(prefix: str, parts: list[str]) -> None:
    uri = prefix + "".join(parts)
    try:
        parsed = modeluri.parse(uri)
    except modeluri.ModelURIError:
        return  # refused for another reason
    assert bool(_DIRECTORY.search(uri)) == parsed.is_prefix, uri
