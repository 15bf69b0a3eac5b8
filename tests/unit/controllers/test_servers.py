"""The runtime table: pinned defaults, ConfigMap overrides and their errors."""

from __future__ import annotations

import dataclasses
import re

import pytest

from mlops_platform.controllers.inferenceservice import servers
from mlops_platform.controllers.inferenceservice.servers import ServingRuntimeError, load_overrides


def test_default_table_covers_every_framework_with_pinned_images() -> None:
    table = servers.default_table()
    assert set(table) == {"triton", "seldon", "torchserve"}
    for spec in table.values():
        for image in filter(None, (spec.image, spec.gpu_image)):
            assert re.search(r":[0-9][\w.-]*$", image), f"{image} is not pinned to a version"
            assert not image.endswith(":latest")
    assert table["triton"].image.startswith("nvcr.io/nvidia/tritonserver:")
    assert table["triton"].image.endswith("-py3")
    assert table["seldon"].image.startswith("docker.io/seldonio/mlserver:")
    assert table["torchserve"].image.endswith("-cpu")
    assert table["torchserve"].image_for(0) == table["torchserve"].image
    assert table["torchserve"].image_for(1).endswith("-gpu")
    assert table["triton"].image_for(1) == table["triton"].image  # one image for CPU and GPU


def test_default_probes_are_the_servers_health_endpoints() -> None:
    table = servers.default_table()
    for framework in ("triton", "seldon"):
        spec = table[framework]
        assert (spec.readiness_probe.path, spec.liveness_probe.path) == (
            "/v2/health/ready",
            "/v2/health/live",
        )
    assert table["torchserve"].readiness_probe.path == "/ping"
    for spec in table.values():
        startup = spec.startup_probe
        assert startup.failure_threshold * startup.period_seconds >= 600  # model loading is slow
        assert spec.progress_deadline_seconds > startup.failure_threshold * startup.period_seconds


def test_templates_render_for_the_port() -> None:
    table = servers.default_table()
    ts = table["torchserve"]
    script = servers.render(ts.args[0], ts.placeholders(8085))
    assert "inference_address=http://0.0.0.0:8085" in script
    assert "management_address=http://127.0.0.1:8081" in script
    assert "exec torchserve --start --foreground" in script
    mls = table["seldon"]
    assert servers.render(mls.env["MLSERVER_HTTP_PORT"], mls.placeholders(9000)) == "9000"


@pytest.mark.parametrize(
    ("framework", "port", "conflict"),
    [("triton", 8001, True), ("triton", 8000, False), ("torchserve", 8081, True), ("seldon", 8082, True)],
)
def test_port_conflicts(framework: str, port: int, conflict: bool) -> None:
    message = servers.default_table()[framework].port_conflict(port)
    assert (message is not None) == conflict
    if message:
        assert str(port) in message


def test_no_data_or_empty_document_keeps_the_defaults() -> None:
    assert load_overrides({}) == servers.default_table()
    assert load_overrides({"runtimes.yaml": ""}) == servers.default_table()
    assert load_overrides({"runtimes.yaml": "triton:\n"}) == servers.default_table()


def test_overrides_merge_field_by_field() -> None:
    data = {
        "runtimes.yaml": """
triton:
  image: registry.example.com/mirror/tritonserver:25.06-py3
  args: [tritonserver, "--model-repository={model_dir}", "--http-port={port}", --log-verbose=1]
  startupProbe: {failureThreshold: 120}
  env: {LD_PRELOAD: /opt/lib.so}
  defaultRequests: {cpu: 2, memory: 8Gi}
  targetCpuUtilization: 60
torchserve:
  runAsUser: 1001
  ports: {metrics: 9082}
"""
    }
    base = servers.default_table()
    table = load_overrides(data)
    triton = table["triton"]
    assert triton.image == "registry.example.com/mirror/tritonserver:25.06-py3"
    assert triton.args[-1] == "--log-verbose=1"
    assert triton.startup_probe == dataclasses.replace(base["triton"].startup_probe, failure_threshold=120)
    assert triton.readiness_probe == base["triton"].readiness_probe
    assert dict(triton.env) == {"LD_PRELOAD": "/opt/lib.so"}
    assert dict(triton.default_requests) == {"cpu": "2", "memory": "8Gi"}
    assert triton.target_cpu_utilization == 60
    ts = table["torchserve"]
    assert ts.run_as_user == 1001
    assert dict(ts.ports) == {"grpc": 7070, "metrics": 9082}
    assert "metrics_address=http://0.0.0.0:9082" in servers.render(ts.args[0], ts.placeholders(8080))
    assert table["seldon"] == base["seldon"]
    assert base["triton"].image.startswith("nvcr.io/")  # the base is never mutated


def test_overrides_apply_over_a_given_base() -> None:
    first = load_overrides({"runtimes.yaml": "seldon: {runAsNonRoot: false}"})
    second = load_overrides({"runtimes.yaml": "seldon: {targetCpuUtilization: 50}"}, base=first)
    assert (second["seldon"].run_as_non_root, second["seldon"].target_cpu_utilization) == (False, 50)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"runtime.yaml": "triton: {}"}, "runtime.yaml: unknown key (expected runtimes.yaml)"),
        ({"runtimes.yaml": "triton: ["}, "runtimes.yaml: invalid YAML"),
        ({"runtimes.yaml": "- triton"}, "runtimes.yaml: expected a map of framework to overrides"),
        ({"runtimes.yaml": "tensorflow: {}"}, "runtimes.yaml: tensorflow: unknown framework"),
        (
            {"runtimes.yaml": "triton: {imagee: x:1}"},
            "runtimes.yaml: triton.imagee: unknown field",
        ),
        (
            {"runtimes.yaml": "triton: {image: 'nvcr.io/nvidia/tritonserver'}"},
            "runtimes.yaml: triton.image: ",
        ),
        ({"runtimes.yaml": "triton: {image: 'tritonserver:latest'}"}, "is not pinned"),
        (
            {"runtimes.yaml": "torchserve: {gpuImage: 'localhost:5000/ts'}"},
            "runtimes.yaml: torchserve.gpuImage:",
        ),
        (
            {"runtimes.yaml": "seldon: {startupProbe: {failureThreshold: 0}}"},
            "runtimes.yaml: seldon.startupProbe.failureThreshold: Expected `int` >= 1",
        ),
        (
            {"runtimes.yaml": "seldon: {readinessProbe: {path: health}}"},
            "runtimes.yaml: seldon.readinessProbe.path",
        ),
        ({"runtimes.yaml": "seldon: {env: {DEBUG: true}}"}, "runtimes.yaml: seldon.env.DEBUG: expected str"),
        ({"runtimes.yaml": "seldon: {env: {'1BAD': x}}"}, "runtimes.yaml: seldon.env.1BAD: not a valid"),
        (
            {"runtimes.yaml": "seldon: {ports: {metrics: '80'}}"},
            "runtimes.yaml: seldon.ports.metrics: expected int",
        ),
        (
            {"runtimes.yaml": "seldon: {ports: {metrics: 70000}}"},
            "runtimes.yaml: seldon.ports.metrics: 70000",
        ),
        (
            {"runtimes.yaml": "seldon: {ports: {Metrics_Port: 9}}"},
            "runtimes.yaml: seldon.ports.Metrics_Port: not a",
        ),
        ({"runtimes.yaml": "seldon: {ports: {http: 9}}"}, "runtimes.yaml: seldon.ports.http: not a valid"),
        (
            {"runtimes.yaml": "seldon: {ports: {metrics: 8081}}"},
            "runtimes.yaml: seldon.ports.grpc: port 8081 is used twice (grpc, metrics)",
        ),
        (
            {"runtimes.yaml": "triton: {args: ['--http-port={prot}']}"},
            "runtimes.yaml: triton.args[0]: unknown placeholder {prot}",
        ),
        ({"runtimes.yaml": "triton: {args: [a, '--x={']}"}, "runtimes.yaml: triton.args[1]: Single '{'"),
        (
            {"runtimes.yaml": "seldon: {env: {X: '{nope}'}}"},
            "runtimes.yaml: seldon.env.X: unknown placeholder {nope}",
        ),
        (
            {"runtimes.yaml": "triton: {runAsUser: -1}"},
            "runtimes.yaml: triton.runAsUser: Expected `int` >= 0",
        ),
        (
            {"runtimes.yaml": "triton: {defaultRequests: {cpu: lots}}"},
            "runtimes.yaml: triton.defaultRequests.cpu",
        ),
        ({"runtimes.yaml": 3}, "runtimes.yaml: expected YAML text"),
    ],
    ids=[
        "unknown-configmap-key",
        "bad-yaml",
        "not-a-map",
        "unknown-framework",
        "unknown-field",
        "untagged-image",
        "latest-image",
        "registry-port-not-a-tag",
        "probe-threshold",
        "probe-path",
        "env-not-string",
        "env-name",
        "port-not-int",
        "port-range",
        "port-name",
        "port-name-http",
        "port-collision",
        "unknown-placeholder",
        "broken-template",
        "env-placeholder",
        "negative-uid",
        "bad-quantity",
        "not-text",
    ],
)
def test_override_errors_name_the_key(data: dict[str, object], error: str) -> None:
    with pytest.raises(ServingRuntimeError) as info:
        load_overrides(data)
    assert str(info.value).startswith(error) or error in str(info.value), str(info.value)
