"""``mlops-platform manifests``' placement flags: what they render, and bad values named."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from mlops_platform.cli import main as cli


def _pod_spec(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["manifests", *args])
    assert result.exit_code == 0, result.output
    (deployment,) = [d for d in yaml.safe_load_all(result.output) if d and d["kind"] == "Deployment"]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_the_default_placement_is_linux_nodes_without_tolerations() -> None:
    spec = _pod_spec()
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert "tolerations" not in spec


def test_node_selectors_replace_the_default_and_tolerations_read_like_kubectl_taints() -> None:
    spec = _pod_spec(
        "--node-selector", "pool=ops", "--node-selector", "zone=a",
        "--toleration", "dedicated=ops:NoSchedule", "--toleration", "gpu:NoExecute",
    )  # fmt: skip
    assert spec["nodeSelector"] == {"pool": "ops", "zone": "a"}
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
    ]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--node-selector", "pool"], "--node-selector"),
        (["--node-selector", "=ops"], "--node-selector"),
        (["--toleration", "dedicated=ops"], "--toleration"),
        (["--toleration", "dedicated=ops:Sometimes"], "--toleration"),
    ],
)
def test_a_bad_placement_value_is_an_error_naming_its_flag(args: list[str], named: str) -> None:
    result = CliRunner().invoke(cli, ["manifests", *args])
    assert result.exit_code == 2
    assert named in result.output and args[1] in result.output
