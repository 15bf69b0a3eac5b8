"""``infer``: where a request goes (the service proxy path per runtime) and the CLI's input errors."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from mlops_platform import cli, infer
from mlops_platform.testing.isvc import manifest

pytestmark = pytest.mark.unit


def isvc(framework: str, **spec: Any) -> dict[str, Any]:
    return manifest("iris", namespace="ml", framework=framework, modelUri="s3://models/iris/1", **spec)


@pytest.mark.parametrize(
    ("framework", "path"),
    [
        ("seldon", "/v2/models/iris/infer"),
        ("triton", "/v2/models/iris/infer"),
        ("torchserve", "/predictions/iris"),
    ],
)
def test_each_runtime_is_asked_in_its_protocol_through_the_service_proxy(framework: str, path: str) -> None:
    t = infer.target(isvc(framework))
    assert t.proxy_path == f"/api/v1/namespaces/ml/services/http:iris-predictor:http/proxy{path}"


def test_the_model_name_and_the_path_can_be_given() -> None:
    assert infer.target(isvc("seldon"), model="other").path == "/v2/models/other/infer"
    assert infer.target(isvc("seldon"), path="/v1/models/{model}:predict").path == "/v1/models/iris:predict"
    with pytest.raises(infer.InferError, match="--path: 'v2' must start with /"):
        infer.target(isvc("seldon"), path="v2")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "exactly one of --json and --file"),
        (["--json", "{}", "--file", "-"], "exactly one of --json and --file"),
        (["--json", "{nope"], "Invalid value for --json: not JSON"),
    ],
)
def test_the_request_body_is_checked_before_anything_is_sent(args: list[str], error: str) -> None:
    result = CliRunner().invoke(cli.main, ["infer", "iris", "-n", "ml", *args])
    assert result.exit_code == 2
    assert error in result.output
