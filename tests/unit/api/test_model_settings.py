"""The model-delivery fields of every version reach the internal model, and a misfit names its field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlops_platform import api
from mlops_platform.api import internal, modeluri

SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
JSON = dict[str, Any]


def v1(version: str = "v1", **model: Any) -> JSON:
    return {
        "apiVersion": f"mlops.platform/{version}",
        "kind": "InferenceService",
        "metadata": {"name": "iris", "namespace": "ml"},
        "spec": {"predictor": {"model": {"uri": "s3://models/iris/1", **model}, "runtime": "seldon"}},
    }


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_v1_and_v1beta1_fields_reach_the_internal_model(version: str) -> None:
    obj = v1(
        version, sha256=SHA, storage={"secretName": "creds", "endpoint": "http://minio:9000", "region": "x"}
    )
    obj["spec"]["predictor"]["serviceAccountName"] = "model-reader"
    obj["spec"]["canary"] = {"model": {"uri": "s3://models/iris/2", "sha256": "0" * 64}, "trafficPercent": 5}
    isvc = api.decode(obj)
    assert isvc.model_sha256 == SHA
    assert isvc.storage == internal.ModelStorage("creds", "http://minio:9000", "x")
    assert isvc.service_account_name == "model-reader"
    assert isvc.traffic is not None
    assert isvc.traffic.model_sha256 == "0" * 64
    assert isvc.traffic.storage == isvc.storage  # the candidate inherits the predictor's storage
    obj["spec"]["canary"]["model"]["storage"] = {"secretName": "staging"}
    canary = api.decode(obj).traffic
    assert canary is not None and canary.storage == internal.ModelStorage("staging")


def test_v1alpha1_says_them_under_extensions_storage() -> None:
    obj = {
        "apiVersion": "mlops.platform/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "iris", "namespace": "ml"},
        "spec": {
            "modelUri": "gs://models/iris/1",
            "framework": "seldon",
            "extensions": {"storage": {"secretName": "gcs", "sha256": SHA, "serviceAccountName": "wi"}},
        },
    }
    isvc = api.decode(obj)
    assert (isvc.storage.secret_name, isvc.model_sha256, isvc.service_account_name) == ("gcs", SHA, "wi")
    obj["spec"]["extensions"]["storage"]["sha256"] = "not-hex"
    with pytest.raises(api.ValidationError, match=r"spec\.extensions\.storage\.sha256"):
        api.decode(obj)


BAD: list[tuple[str, JSON, str]] = [
    ("sha-on-pvc", {"uri": "pvc://models/iris", "sha256": SHA}, r"spec\.predictor\.model\.sha256: only for"),
    ("storage-on-file", {"uri": "file:///models/iris", "storage": {}}, r"spec\.predictor\.model\.storage"),
    ("sha-on-prefix", {"uri": "s3://models/iris/", "sha256": SHA}, r"model\.sha256: verifies one file"),
    ("region-on-gs", {"uri": "gs://models/iris", "storage": {"region": "eu"}}, r"storage\.region: is for s3"),
    (
        "endpoint-on-https",
        {"uri": "https://h.example/iris.tgz", "storage": {"endpoint": "http://x"}},
        r"storage\.endpoint: is for s3:// and gs://",
    ),
    ("bad-bucket", {"uri": "s3://Models/iris"}, r"spec\.predictor\.model\.uri: .*not a bucket name"),
    ("bad-claim", {"uri": "pvc://My_Claim/x"}, r"spec\.predictor\.model\.uri: .*PersistentVolumeClaim"),
    ("bad-sha", {"sha256": "ABC"}, r"spec\.predictor\.model\.sha256"),
    ("bad-secret", {"storage": {"secretName": "Not_A_Name"}}, r"spec\.predictor\.model\.storage\.secretName"),
]


@pytest.mark.parametrize(("model", "message"), [pytest.param(m, e, id=i) for i, m, e in BAD])
def test_a_setting_that_does_not_fit_its_model_names_the_field(model: JSON, message: str) -> None:
    obj = v1()
    obj["spec"]["predictor"]["model"].update(copy.deepcopy(model))
    with pytest.raises(api.ValidationError, match=message):
        api.decode(obj)


def test_the_canary_model_is_checked_too() -> None:
    obj = v1()
    obj["spec"]["canary"] = {"model": {"uri": "pvc://claim/x", "sha256": SHA}}
    with pytest.raises(api.ValidationError, match=r"spec\.canary\.model\.sha256"):
        api.decode(obj)


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_the_v1alpha1_extension_in_a_newer_version_is_refused_naming_the_fields(version: str) -> None:
    obj = v1(version)
    obj["spec"]["extensions"] = {"storage": {"sha256": SHA, "secretName": "s"}}
    with pytest.raises(
        api.ValidationError, match=r"spec\.extensions\.storage: .*spec\.predictor\.model\.sha256"
    ):
        api.decode(obj)


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("s3://models/iris/1", modeluri.ModelURI("s3", "models", "iris/1")),
        ("gs://b/dir/", modeluri.ModelURI("gs", "b", "dir/")),
        (
            "https://h.example:8443/m/iris.tar.gz",
            modeluri.ModelURI("https", "h.example:8443", "m/iris.tar.gz"),
        ),
        ("pvc://claim/models/iris/", modeluri.ModelURI("pvc", "claim", "models/iris")),
        ("pvc://claim", modeluri.ModelURI("pvc", "claim", "")),
        ("file:///opt/models/iris", modeluri.ModelURI("file", "", "/opt/models/iris")),
    ],
)
def test_model_uris_parse(uri: str, parsed: modeluri.ModelURI) -> None:
    assert modeluri.parse(uri) == parsed


@pytest.mark.parametrize(
    "uri", ["ftp://h/x", "s3://", "file://relative", "file:///", "http://h/", "s3://b/../x", "pvc://c/a/./b"]
)
def test_bad_model_uris_say_why(uri: str) -> None:
    with pytest.raises(modeluri.ModelURIError, match=r"\S"):
        modeluri.parse(uri)
