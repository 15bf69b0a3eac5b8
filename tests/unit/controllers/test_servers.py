"""The runtime table: pinned defaults, ConfigMap overrides and their errors."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from typing import Any

import pytest

from mlops_platform import api
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import runtime_overrides, servers
from mlops_platform.controllers.inferenceservice.runtime_overrides import ServingRuntimeError, load_overrides


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
    triton, mlserver = table["triton"], table["seldon"]
    assert triton.readiness_probe.path == "/v2/health/ready"  # strict: every model loaded
    assert triton.liveness_probe.path == "/v2/health/live"
    # MLServer's /v2/health/ready says ready before its model is registered: the model's own
    model = "/v2/models/{model_name}/ready"
    assert (mlserver.readiness_probe.path, mlserver.startup_probe.path) == (model, model)
    assert mlserver.liveness_probe.path == "/v2/health/live"
    assert servers.render(model, mlserver.placeholders(8080, "iris")) == "/v2/models/iris/ready"
    assert table["torchserve"].readiness_probe.path == "/ping"
    for spec in table.values():
        startup = spec.startup_probe
        assert startup.failure_threshold * startup.period_seconds >= 600  # model loading is slow
        assert spec.progress_deadline_seconds > startup.failure_threshold * startup.period_seconds


def test_templates_render_for_the_port() -> None:
    table = servers.default_table()
    ts = table["torchserve"]
    script = servers.render(ts.args[0], ts.placeholders(8085, "m"))
    assert "inference_address=http://0.0.0.0:8085" in script
    assert "management_address=http://127.0.0.1:8081" in script
    assert "grpc_inference_address=0.0.0.0" in script  # else gRPC listens inside the pod only
    # the shell stays the first process and stops TorchServe on SIGTERM (its launcher ignores it)
    assert "trap 'torchserve --stop' TERM" in script and "torchserve --start --foreground" in script
    assert "exec " not in script
    assert subprocess.run(["/bin/sh", "-n", "-c", script], check=False).returncode == 0  # it parses
    mls = table["seldon"]
    assert servers.render(mls.env["MLSERVER_HTTP_PORT"], mls.placeholders(9000, "m")) == "9000"


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
    assert "metrics_address=http://0.0.0.0:9082" in servers.render(ts.args[0], ts.placeholders(8080, "m"))
    assert table["seldon"] == base["seldon"]
    assert base["triton"].image.startswith("nvcr.io/")  # the base is never mutated


def test_overrides_apply_over_a_given_base() -> None:
    first = load_overrides({"runtimes.yaml": "seldon: {runAsNonRoot: false}"})
    second = load_overrides({"runtimes.yaml": "seldon: {targetCpuUtilization: 50}"}, base=first)
    assert (second["seldon"].run_as_non_root, second["seldon"].target_cpu_utilization) == (False, 50)


def test_placement_overrides_merge_the_node_selector_and_replace_the_tolerations() -> None:
    first = load_overrides(
        {
            "runtimes.yaml": """
seldon:
  nodeSelector: {pool: cpu}
  tolerations: [{key: dedicated, operator: Equal, value: models, effect: NoSchedule}]
"""
        }
    )
    second = load_overrides(
        {
            "runtimes.yaml": """
seldon:
  nodeSelector: {mlops.platform/real-node: "true"}
  tolerations: [{key: mlops.platform/real-node, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}]
"""
        },
        base=first,
    )
    assert dict(second["seldon"].node_selector) == {"pool": "cpu", "mlops.platform/real-node": "true"}
    assert [dict(t) for t in second["seldon"].tolerations] == [
        {
            "key": "mlops.platform/real-node",
            "operator": "Exists",
            "effect": "NoSchedule",
            "tolerationSeconds": 5,
        }
    ]
    assert servers.default_table()["seldon"].tolerations == ()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (
            {"runtimes.yaml": "seldon: {drainSeconds: 60}"},
            "runtimes.yaml: seldon.drainSeconds: 60 leaves the server no time to stop within "
            "terminationGracePeriodSeconds 60",
        ),
        (
            {"runtimes.yaml": "seldon: {drainSeconds: -1}"},
            "runtimes.yaml: seldon.drainSeconds: Expected `int` >= 0",
        ),
        (
            {"runtimes.yaml": "seldon: {nodeSelector: {pool: 3}}"},
            "runtimes.yaml: seldon.nodeSelector.pool: expected str",
        ),
        (
            {"runtimes.yaml": "seldon: {nodeSelector: {pool: 'a b'}}"},
            "runtimes.yaml: seldon.nodeSelector.pool: 'a b' is not a valid label value",
        ),
        (
            {"runtimes.yaml": "seldon: {tolerations: [{key: a, operator: Exists, value: b}]}"},
            "runtimes.yaml: seldon.tolerations[0].value: must be empty when operator is Exists",
        ),
        (
            {"runtimes.yaml": "seldon: {tolerations: [{value: b}]}"},
            "runtimes.yaml: seldon.tolerations[0].operator: must be Exists when key is empty",
        ),
        (
            {"runtimes.yaml": "seldon: {tolerations: [{key: a, effect: Never}]}"},
            "runtimes.yaml: seldon.tolerations[0].effect",
        ),
        ({"runtime.yaml": "triton: {}"}, "runtime.yaml: unknown key (expected runtimes.yaml)"),
        ({"runtimes.yaml": "triton: ["}, "runtimes.yaml: invalid YAML"),
        ({"runtimes.yaml": "- triton"}, "runtimes.yaml: expected a map of runtime name to its fields"),
        ({"runtimes.yaml": "tensorflow: {}"}, "runtimes.yaml: tensorflow.image: required for a new runtime"),
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
            {"runtimes.yaml": "seldon: {readinessProbe: {path: '/v2/models/{model}/ready'}}"},
            "runtimes.yaml: seldon.readinessProbe.path: unknown placeholder {model}",
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
        "drain-longer-than-grace",
        "drain-negative",
        "node-selector-not-string",
        "node-selector-not-a-label-value",
        "toleration-exists-with-value",
        "toleration-without-key",
        "toleration-effect",
        "unknown-configmap-key",
        "bad-yaml",
        "not-a-map",
        "new-runtime-without-definition",
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
        "probe-placeholder",
        "negative-uid",
        "bad-quantity",
        "not-text",
    ],
)
def test_override_errors_name_the_key(data: dict[str, object], error: str) -> None:
    with pytest.raises(ServingRuntimeError) as info:
        load_overrides(data)
    assert str(info.value).startswith(error) or error in str(info.value), str(info.value)


# -- formats and the one runtime validation ----------------------------------------------------------


def isvc(framework: str = "triton", **fields: Any) -> internal.InferenceService:
    return internal.InferenceService("bert", "ml", "uid", 1, framework, "s3://models/bert", **fields)


def test_built_in_runtimes_declare_lowercase_formats_and_their_metrics_dialect() -> None:
    table = servers.default_table()
    assert table["triton"].formats == ("tensorrt", "onnx", "pytorch", "openvino", "python", "triton")
    assert {"sklearn", "xgboost", "lightgbm", "mlflow", "huggingface"} <= set(table["seldon"].formats)
    assert table["torchserve"].formats == ("pytorch",)
    for name, rt in table.items():
        assert rt.metrics_dialect == name  # each built-in exports its own server's metrics
        assert all(f == f.lower() and runtime_overrides.RUNTIME_NAME.match(f) for f in rt.formats)
    assert set(servers.METRICS_DIALECTS) == {"triton", "seldon", "torchserve", "none"}


def test_built_in_runtimes_declare_their_model_layout() -> None:
    table = servers.default_table()
    layouts = {name: rt.model_layout for name, rt in table.items()}
    assert layouts == {"triton": "triton", "seldon": "mlserver", "torchserve": "torchserve"}
    assert set(servers.MODEL_LAYOUTS) == {"triton", "mlserver", "torchserve", "none"}


def test_the_model_layout_is_overridden_inherited_and_defaults_to_none_from_scratch() -> None:
    table = load_overrides(
        {
            "runtimes.yaml": FULL
            + """
triton:
  modelLayout: none
big:
  basedOn: torchserve
flat:
  basedOn: custom
  modelLayout: mlserver
"""
        }
    )
    assert table["triton"].model_layout == "none"  # an override replaces it
    assert table["big"].model_layout == "torchserve"  # inherited through basedOn
    assert table["custom"].model_layout == "none"  # a runtime from scratch: the artifact as it is
    assert table["flat"].model_layout == "mlserver"


def test_an_empty_format_list_serves_any_format() -> None:
    rt = dataclasses.replace(servers.default_table()["triton"], formats=())
    assert rt.serves("anything") and servers.default_table()["triton"].serves("ONNX")
    assert not servers.default_table()["triton"].serves("sklearn")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"framework": "tensorflow"},
            "spec.predictor.runtime: no runtime 'tensorflow' in the runtime table "
            "(known: seldon, torchserve, triton)",
        ),
        (
            {"model_format": "sklearn"},
            "spec.predictor.model.format: runtime 'triton' serves tensorrt, onnx, pytorch, openvino, "
            "python, triton — not 'sklearn'",
        ),
        (
            {"framework": "torchserve", "traffic": internal.Traffic("v2", 10, "s3://m/v2", "onnx")},
            "spec.canary.model.format: runtime 'torchserve' serves pytorch — not 'onnx'",
        ),
        ({"port": 8001}, "spec.predictor.port: port 8001 is the tritonserver grpc port; choose another"),
    ],
    ids=["unknown-runtime", "unsupported-format", "unsupported-canary-format", "port-conflict"],
)
def test_validate_names_the_v1_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(api.ValidationError) as info:
        servers.validate(isvc(**fields), servers.default_table())
    assert str(info.value) == message


def test_validate_passes_declared_formats_the_runtime_serves_and_undeclared_ones() -> None:
    table = servers.default_table()
    assert servers.validate(isvc(model_format="onnx"), table) is table["triton"]
    assert servers.validate(isvc("seldon", model_format="XGBoost"), table) is table["seldon"]  # case
    canary = internal.Traffic("v2", 10, "s3://m/v2", None)  # the candidate declares no format
    assert servers.validate(isvc("torchserve", model_format="pytorch", traffic=canary), table)
    assert servers.validate(isvc(), table) is table["triton"]  # v1alpha1 declares no format


# -- runtimes a platform team adds ------------------------------------------------------------------


FULL = """
custom:
  image: registry.example.com/acme/server:1.2.3
  args: [serve, "--port={port}", "--dir={model_dir}", "--metrics={metrics_port}"]
  ports: {metrics: 9090}
  readinessProbe: {path: /ready}
  livenessProbe: {path: /live, periodSeconds: 20}
  formats: [onnx, acme]
  metricsDialect: none
"""


def test_a_runtime_based_on_another_inherits_everything_and_merges_its_fields() -> None:
    table = load_overrides(
        {
            "runtimes.yaml": """
triton-big:
  basedOn: triton
  startupProbe: {failureThreshold: 180}
  defaultRequests: {cpu: "4", memory: 16Gi}
  formats: [onnx, tensorrt]
triton:
  image: registry.example.com/mirror/tritonserver:25.06-py3
"""
        }
    )
    triton, big = table["triton"], table["triton-big"]
    assert big.image == triton.image == "registry.example.com/mirror/tritonserver:25.06-py3"  # as overridden
    assert (big.args, big.ports, big.readiness_probe) == (triton.args, triton.ports, triton.readiness_probe)
    assert big.startup_probe == dataclasses.replace(triton.startup_probe, failure_threshold=180)
    assert dict(big.default_requests) == {"cpu": "4", "memory": "16Gi"}
    assert (big.formats, big.metrics_dialect, big.server) == (("onnx", "tensorrt"), "triton", "tritonserver")
    assert set(table) == {"triton", "seldon", "torchserve", "triton-big"}


def test_based_on_chains_in_any_order_and_an_override_table_is_a_base_again() -> None:
    table = load_overrides({"runtimes.yaml": "b: {basedOn: a, runAsUser: 7}\na: {basedOn: seldon}\n"})
    assert (table["a"].image, table["b"].image) == (table["seldon"].image, table["seldon"].image)
    assert (table["a"].run_as_user, table["b"].run_as_user, table["b"].metrics_dialect) == (1000, 7, "seldon")
    again = load_overrides({"runtimes.yaml": "b: {targetCpuUtilization: 50}"}, base=table)
    assert (again["b"].target_cpu_utilization, again["b"].run_as_user) == (50, 7)


def test_a_full_definition_gets_the_documented_defaults() -> None:
    rt = load_overrides({"runtimes.yaml": FULL})["custom"]
    assert (rt.server, rt.image, rt.command) == ("custom", "registry.example.com/acme/server:1.2.3", ())
    assert servers.render(rt.args[1], rt.placeholders(8080, "m")) == "--port=8080"
    assert servers.render(rt.args[3], rt.placeholders(8080, "m")) == "--metrics=9090"
    assert rt.readiness_probe == servers.Probe("/ready")
    assert rt.liveness_probe == servers.Probe("/live", period_seconds=20)
    assert rt.startup_probe == servers.Probe("/live", period_seconds=2, failure_threshold=300)  # 10 minutes
    assert (rt.formats, rt.metrics_dialect) == (("onnx", "acme"), "none")
    assert (rt.run_as_user, rt.run_as_non_root, rt.metrics_path, rt.model_dir) == (
        1000,
        True,
        "/metrics",
        "/mnt/models",
    )
    assert dict(rt.default_requests) == {"cpu": "1", "memory": "2Gi"}
    assert rt.port_conflict(9090) is not None


def _without(key: str) -> str:
    lines = [line for line in FULL.strip().splitlines() if not line.strip().startswith(f"{key}:")]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (_without("image"), "runtimes.yaml: custom.image: required for a new runtime (or say basedOn"),
        (_without("args"), "runtimes.yaml: custom.args/command: required"),
        (_without("readinessProbe"), "runtimes.yaml: custom.readinessProbe.path: required"),
        (
            FULL.replace(
                "livenessProbe: {path: /live, periodSeconds: 20}", "livenessProbe: {periodSeconds: 20}"
            ),
            "runtimes.yaml: custom.livenessProbe.path: required",
        ),
        (_without("metricsDialect"), "runtimes.yaml: custom.metricsDialect: required"),
        (
            FULL.replace("metricsDialect: none", "metricsDialect: prometheus"),
            "runtimes.yaml: custom.metricsDialect: Invalid enum value 'prometheus' "
            "(expected one of triton, seldon, torchserve, none)",
        ),
        (
            FULL + "  modelLayout: kserve\n",
            "runtimes.yaml: custom.modelLayout: Invalid enum value 'kserve' "
            "(expected one of triton, mlserver, torchserve, none)",
        ),
        (
            FULL + "  modelLayout: 1\n",
            "runtimes.yaml: custom.modelLayout: Expected `str | null`, got `int` (expected one of triton",
        ),
        (
            FULL.replace("[onnx, acme]", "[onnx, ONNX]"),
            "runtimes.yaml: custom.formats[1]: 'ONNX' is not a format",
        ),
        (
            FULL.replace("[onnx, acme]", "[onnx, onnx]"),
            "runtimes.yaml: custom.formats[1]: 'onnx' is listed twice",
        ),
        (
            FULL.replace("server:1.2.3", "server"),
            "runtimes.yaml: custom.image: 'registry.example.com/acme/server'",
        ),
        (FULL + "  serverName: x\n", "runtimes.yaml: custom.serverName: unknown field"),
        (
            FULL + "  server: 'not a label'\n",
            "runtimes.yaml: custom.server: 'not a label' is not a valid label",
        ),
        ("Custom: {basedOn: triton}", "runtimes.yaml: Custom: not a valid runtime name (a DNS label"),
        ("a_b: {basedOn: triton}", "runtimes.yaml: a_b: not a valid runtime name"),
        (f"{'x' * 64}: {{basedOn: triton}}", f"runtimes.yaml: {'x' * 64}: not a valid runtime name"),
        ("7: {basedOn: triton}", "runtimes.yaml: 7: not a valid runtime name"),
        (
            "big: {basedOn: tritonn}",
            "runtimes.yaml: big.basedOn: no runtime 'tritonn' (known: seldon, torchserve, triton)",
        ),
        ("triton: {basedOn: seldon}", "runtimes.yaml: triton.basedOn: triton already exists"),
        ("a: {basedOn: b}\nb: {basedOn: a}", "runtimes.yaml: a.basedOn: a cycle (a -> b -> a)"),
        ("a: {basedOn: a}", "runtimes.yaml: a.basedOn: a cycle (a -> a)"),
        (
            "big: {basedOn: triton, ports: {grpc: 8002}}",
            "runtimes.yaml: big.ports.grpc: port 8002 is used twice",
        ),
    ],
    ids=[
        "no-image",
        "no-args-or-command",
        "no-readiness-probe",
        "no-liveness-path",
        "no-dialect",
        "unknown-dialect",
        "unknown-layout",
        "layout-not-a-string",
        "format-not-lowercase",
        "format-twice",
        "unpinned-image",
        "unknown-field",
        "server-not-a-label",
        "name-uppercase",
        "name-underscore",
        "name-too-long",
        "name-not-a-string",
        "unknown-base",
        "base-of-an-existing-entry",
        "cycle",
        "self-base",
        "inherited-fields-checked",
    ],
)
def test_added_runtime_errors_name_the_key(text: str, error: str) -> None:
    with pytest.raises(ServingRuntimeError) as info:
        load_overrides({"runtimes.yaml": text})
    assert str(info.value).startswith(error), str(info.value)


def test_an_added_runtime_is_served_to_an_inferenceservice_of_that_runtime() -> None:
    table = load_overrides({"runtimes.yaml": FULL})
    service = isvc("custom", model_format="acme")
    assert servers.validate(service, table) is table["custom"]
    with pytest.raises(api.ValidationError, match="runtime 'custom' serves onnx, acme — not 'sklearn'"):
        servers.validate(dataclasses.replace(service, model_format="sklearn"), table)
