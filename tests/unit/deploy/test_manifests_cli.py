"""``mlops-platform manifests``' placement flags: what they render, and bad values named."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from mlops_platform.cli import main as cli


def _pod_specs(*args: str) -> dict[str, dict[str, Any]]:
    """Each Deployment's pod spec, by the Deployment's name."""
    result = CliRunner().invoke(cli, ["manifests", *args])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d and d["kind"] == "Deployment"]
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs}


def test_the_default_placement_is_linux_nodes_without_tolerations() -> None:
    specs = _pod_specs()
    assert set(specs) == {"mlops-platform", "mlops-activator"}
    for spec in specs.values():
        assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert "tolerations" not in spec


def test_node_selectors_replace_the_default_and_tolerations_read_like_kubectl_taints() -> None:
    specs = _pod_specs(
        "--node-selector", "pool=ops", "--node-selector", "zone=a",
        "--toleration", "dedicated=ops:NoSchedule", "--toleration", "gpu:NoExecute",
    )  # fmt: skip
    for spec in specs.values():  # the manager's and the activator's pods
        assert spec["nodeSelector"] == {"pool": "ops", "zone": "a"}
        assert spec["tolerations"] == [
            {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"},
            {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
        ]


def test_no_activator_leaves_out_the_activator_and_the_managers_flag() -> None:
    result = CliRunner().invoke(cli, ["manifests", "--no-activator"])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    assert not [d for d in docs if d["metadata"]["name"] == "mlops-activator"]
    (manager,) = [d for d in docs if d["kind"] == "Deployment"]
    assert not [a for a in manager["spec"]["template"]["spec"]["containers"][0]["args"] if "activator" in a]


def test_the_activator_with_watched_namespaces_is_an_error_naming_the_flags() -> None:
    result = CliRunner().invoke(cli, ["manifests", "--watch-namespace", "team-a", "--activator"])
    assert result.exit_code == 2
    assert "--activator" in result.output and "--watch-namespace" in result.output


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
