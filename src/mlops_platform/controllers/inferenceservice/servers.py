"""The runtime table: which model server image runs a runtime, and how.

Contract:
- :func:`default_table` gives real upstream images pinned to a release tag, each server's own
  command line, ports, health endpoints, the model formats it serves and the dialect of its
  request metrics (sources and caveats: ``docs/serving-runtimes.md``).
- Command, args, env values and probe paths are templates: ``{port}`` (``spec.predictor.port``),
  ``{model_dir}``, ``{model_name}`` (the name the server gives the model: the InferenceService's),
  ``{cpu_workers}`` (:func:`cpu_workers`: the container's whole cores, at least 1) and
  ``{<name>_port}`` for every named port of the runtime are substituted by :func:`render`;
  ``{{``/``}}`` are literal braces.
- Overrides of the table (``--runtime-config``, a ConfigMap's ``runtimes.yaml``):
  :mod:`~.runtime_overrides`.
- :func:`validate` is what only the table can tell about an InferenceService (its runtime exists,
  serves the declared model formats, does not bind its port): the reconciler and ``why`` call it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, get_args

from mlops_platform import api
from mlops_platform.api import internal
from mlops_platform.runtime import quantity

DEFAULT_MODEL_DIR = "/mnt/models"

#: Whose request metrics a runtime exports, i.e. which expressions the alerts and the KEDA trigger
#: use (``alert_queries.SERVERS``); ``none``: no request metric the operator knows (only the replica alerts,
#: and a KEDA trigger on the mesh's request count alone).
MetricsDialect = Literal["triton", "seldon", "torchserve", "none"]
METRICS_DIALECTS: tuple[str, ...] = get_args(MetricsDialect)
NO_METRICS: MetricsDialect = "none"

#: How the runtime expects the files of its model directory (``--layout`` of the storage
#: initializer, ``docs/model-delivery.md``): a Triton model repository, an MLServer models
#: directory, a TorchServe model store, or ``none``: the artifact as it is.
ModelLayout = Literal["triton", "mlserver", "torchserve", "none"]
MODEL_LAYOUTS: tuple[str, ...] = get_args(ModelLayout)
NO_LAYOUT: ModelLayout = "none"


@dataclasses.dataclass(frozen=True, slots=True)
class Probe:
    """An HTTP GET probe on the inference port."""

    path: str
    period_seconds: int = 10
    timeout_seconds: int = 5
    failure_threshold: int = 3


def _frozen(**items: str) -> Mapping[str, str]:
    return MappingProxyType(items)


@dataclasses.dataclass(frozen=True, slots=True)
class ServingRuntime:
    """How one runtime is served. ``ports`` are exposed container ports besides ``http``;
    ``internal_ports`` are bound by the server but not exposed (both are reserved: the
    InferenceService's port must not use them). ``default_requests`` fill in a resource the spec
    leaves unset. ``formats`` are the model formats it serves (empty: any); ``metrics_dialect``
    says whose request metrics it exports (:data:`MetricsDialect`); ``model_layout`` how the storage
    initializer lays out a downloaded model for it (:data:`ModelLayout`). ``node_selector`` and
    ``tolerations`` place its pods (as a KServe ServingRuntime's): e.g. the local cluster's real
    node, or a pool of CPU nodes for it; a GPU service adds the GPU toleration."""

    server: str
    image: str
    args: tuple[str, ...]
    ports: Mapping[str, int]
    readiness_probe: Probe
    liveness_probe: Probe
    startup_probe: Probe
    gpu_image: str | None = None
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    internal_ports: Mapping[str, int] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    run_as_user: int | None = 1000
    run_as_non_root: bool = True
    default_requests: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: _frozen(cpu="1", memory="2Gi")
    )
    metrics_path: str | None = "/metrics"
    model_dir: str = DEFAULT_MODEL_DIR
    target_cpu_utilization: int = 80
    termination_grace_period_seconds: int = 60
    #: a terminating pod keeps serving this long before its server is told to stop (a preStop
    #: sleep): every load balancer (kube-proxy, the API server's proxy, a mesh, a gateway) has then
    #: seen its endpoint go, so a rollout fails no request; 0: none
    drain_seconds: int = 5
    progress_deadline_seconds: int = 900  # > the startup probe's 10 minutes
    formats: tuple[str, ...] = ()
    metrics_dialect: MetricsDialect = NO_METRICS
    model_layout: ModelLayout = NO_LAYOUT
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=_frozen)
    tolerations: tuple[Mapping[str, str | int], ...] = ()

    def serves(self, model_format: str) -> bool:
        """Whether this runtime serves ``model_format`` (any format when ``formats`` is empty)."""
        return not self.formats or model_format.lower() in self.formats

    def image_for(self, gpu_per_replica: int) -> str:
        return self.gpu_image if gpu_per_replica > 0 and self.gpu_image else self.image

    def placeholders(self, port: int, model_name: str, workers: int = 1) -> dict[str, str]:
        values = {"port": str(port), "model_dir": self.model_dir, "model_name": model_name}
        values["cpu_workers"] = str(workers)
        for name, number in {**self.internal_ports, **self.ports}.items():
            values[f"{name}_port"] = str(number)
        return values

    def port_conflict(self, port: int) -> str | None:
        """A message when ``port`` collides with a port this server binds for something else."""
        for name, number in {**self.ports, **self.internal_ports}.items():
            if number == port:
                return f"port {port} is the {self.server} {name} port; choose another"
        return None


ServingRuntimeTable = Mapping[str, ServingRuntime]


def cpu_workers(compute: Mapping[str, Mapping[str, str]]) -> int:
    """The inference worker processes a server should run beside its serving process, from the
    container's CPU (``compute``: its ``requests`` and ``limits``; the limit, else the request): one
    per whole core, at least one (Seldon's advice for MLServer's ``parallel_workers``: in line with
    the pod's cores; MLServer's own default is one whatever the CPU).

    Not none on one core, though the worker process then adds a second interpreter and a hop and no
    parallelism: MLServer 1.7 answers a model's exception raised in its serving process (no worker)
    with its debug traceback as a 500 (in one make test run such an answer arrived truncated through
    the API server's proxy), where a worker's exception is a JSON ``{"error": ...}`` naming the
    model's own message."""
    cpu = (compute.get("limits") or {}).get("cpu") or (compute.get("requests") or {}).get("cpu")
    return max(1, int(quantity.parse(cpu))) if cpu is not None else 1


# liveness fails after 3 x 10 s; startup allows 300 x 2 s = 10 min for model loading before it
STARTUP_FAILURES = 300
#: the startup probe looks every 2 s (300 x 2 s = 10 minutes for loading): a pod is Ready within ~2 s
#: of its model loaded (every 10 s added up to 10 s to each cold start: bench/serving.py)
STARTUP_PERIOD = 2
#: TorchServe's launcher ignores SIGTERM as a container's first process (checked against 0.12.0:
#: still serving 10 s after it), so the shell stays first and stops it (``torchserve --stop``: gone
#: 2.6 s after SIGTERM); gRPC binds 127.0.0.1 unless told (this file replaces the image's, which
#: said 0.0.0.0)
_TS_CONFIG = (
    "mkdir -p /tmp/ts && printf '%s\\n'"
    " 'inference_address=http://0.0.0.0:{port}'"
    " 'management_address=http://127.0.0.1:{management_port}'"
    " 'metrics_address=http://0.0.0.0:{metrics_port}' 'metrics_mode=prometheus'"
    " 'grpc_inference_address=0.0.0.0' 'grpc_inference_port={grpc_port}'"
    " 'grpc_management_port={grpc_management_port}'"
    " > /tmp/ts/config.properties"
    " && trap 'torchserve --stop' TERM"
    " && torchserve --start --foreground --ncs --disable-token-auth"
    " --model-store={model_dir} --models=all --ts-config=/tmp/ts/config.properties & ts=$!;"
    " wait $ts; wait $ts"
)

#: Triton 25.06's backends (TensorRT, ONNX Runtime, PyTorch: TorchScript and PyTorch 2, OpenVINO,
#: Python) and ``triton``, KServe's name for a Triton model repository (any backend its
#: ``config.pbtxt`` names). Not ``tensorflow``: its backend is deprecated since 25.03.
TRITON_FORMATS = ("tensorrt", "onnx", "pytorch", "openvino", "python", "triton")
#: the inference runtimes the full MLServer 1.7 image installs
MLSERVER_FORMATS = (
    "sklearn",
    "xgboost",
    "lightgbm",
    "catboost",
    "mlflow",
    "huggingface",
    "mllib",
    "alibi-detect",
    "alibi-explain",
)
#: TorchServe serves model archives (``.mar``) of eager-mode or TorchScript PyTorch models
TORCHSERVE_FORMATS = ("pytorch",)


def default_table() -> ServingRuntimeTable:
    """The built-in table (a fresh read-only mapping). Sources: ``docs/serving-runtimes.md``."""
    ready_v2, live_v2 = Probe("/v2/health/ready"), Probe("/v2/health/live")
    startup_v2 = Probe("/v2/health/live", period_seconds=STARTUP_PERIOD, failure_threshold=STARTUP_FAILURES)
    triton = ServingRuntime(
        server="tritonserver",
        image="nvcr.io/nvidia/tritonserver:25.06-py3",
        args=(
            "tritonserver",
            "--model-repository={model_dir}",
            "--http-port={port}",
            "--grpc-port={grpc_port}",
            "--metrics-port={metrics_port}",
        ),
        ports=MappingProxyType({"grpc": 8001, "metrics": 8002}),
        readiness_probe=ready_v2,
        liveness_probe=live_v2,
        startup_probe=startup_v2,
        run_as_user=1000,  # the image runs as root by default; it ships triton-server, uid 1000
        formats=TRITON_FORMATS,
        metrics_dialect="triton",
        model_layout="triton",
    )
    torchserve = ServingRuntime(
        server="torchserve",
        image="docker.io/pytorch/torchserve:0.12.0-cpu",
        gpu_image="docker.io/pytorch/torchserve:0.12.0-gpu",
        command=("/bin/sh", "-c"),
        args=(_TS_CONFIG,),
        ports=MappingProxyType({"grpc": 7070, "metrics": 8082}),
        internal_ports=MappingProxyType({"management": 8081, "grpc_management": 7071}),
        readiness_probe=Probe("/ping"),
        liveness_probe=Probe("/ping"),
        startup_probe=Probe("/ping", period_seconds=STARTUP_PERIOD, failure_threshold=STARTUP_FAILURES),
        run_as_user=1000,  # USER model-server is a name: the kubelet needs a uid to check non-root
        formats=TORCHSERVE_FORMATS,
        metrics_dialect="torchserve",
        model_layout="torchserve",
    )
    return MappingProxyType({"triton": triton, "seldon": _mlserver(live_v2), "torchserve": torchserve})


def _mlserver(live: Probe) -> ServingRuntime:
    """The built-in ``seldon`` runtime: MLServer (``live``: its liveness probe, Triton's too)."""
    # MLServer's server-wide readiness answers 200 before its model is registered (a model that
    # then fails to load made a pod Ready for a moment): it is asked about the model itself, and
    # the startup probe too, so the pod is Ready as soon as the model is (the readiness probe runs
    # at once when the startup probe passes)
    model_ready = "/v2/models/{model_name}/ready"
    return ServingRuntime(
        server="mlserver",
        image="docker.io/seldonio/mlserver:1.7.1",
        args=("mlserver", "start", "{model_dir}"),
        env=_frozen(
            MLSERVER_HTTP_PORT="{port}",
            MLSERVER_GRPC_PORT="{grpc_port}",
            MLSERVER_METRICS_PORT="{metrics_port}",
            MLSERVER_MODELS_DIR="{model_dir}",
            # one inference worker process per core (MLServer's default: one, whatever the CPU)
            MLSERVER_PARALLEL_WORKERS="{cpu_workers}",
        ),
        ports=MappingProxyType({"grpc": 8081, "metrics": 8082}),
        readiness_probe=Probe(model_ready),
        liveness_probe=live,
        startup_probe=Probe(model_ready, period_seconds=STARTUP_PERIOD, failure_threshold=STARTUP_FAILURES),
        run_as_user=1000,  # the image declares USER 1000
        formats=MLSERVER_FORMATS,
        metrics_dialect="seldon",
        model_layout="mlserver",
    )


def render(template: str, values: Mapping[str, str]) -> str:
    """Substitute ``{name}`` placeholders (``KeyError`` on an unknown one)."""
    return template.format_map(values)


# -- an InferenceService against the table ------------------------------------------------------

#: the fields :func:`validate` names, as the v1 API (the hub) spells them
RUNTIME_FIELD = "spec.predictor.runtime"
FORMAT_FIELD = "spec.predictor.model.format"
CANARY_FORMAT_FIELD = "spec.canary.model.format"
PORT_FIELD = "spec.predictor.port"


def validate(isvc: internal.InferenceService, table: ServingRuntimeTable) -> ServingRuntime:
    """The runtime of ``isvc``, once what only the table can tell holds; else
    :class:`api.ValidationError` naming the field (the v1 path):

    - the runtime is in the table (``spec.predictor.runtime``);
    - it serves the model format the predictor and the canary declare (``spec.predictor.model.format``,
      ``spec.canary.model.format``; an undeclared format is not checked);
    - the port is not one the server binds for something else (``spec.predictor.port``, e.g.
      Triton's gRPC 8001): its pods could never start.

    The reconciler runs it before building anything (a failure is ``Ready=False/InvalidSpec``);
    ``why`` runs the same function, so both say the same.
    """
    rt = table.get(isvc.framework)
    if rt is None:
        raise api.ValidationError(
            f"{RUNTIME_FIELD}: no runtime {isvc.framework!r} in the runtime table "
            f"(known: {', '.join(sorted(table))})"
        )
    declared = [(FORMAT_FIELD, isvc.model_format)]
    if isvc.traffic is not None:
        declared.append((CANARY_FORMAT_FIELD, isvc.traffic.model_format))
    for field, model_format in declared:
        if model_format is not None and not rt.serves(model_format):
            raise api.ValidationError(
                f"{field}: runtime {isvc.framework!r} serves {', '.join(rt.formats)} — not {model_format!r}"
            )
    conflict = rt.port_conflict(isvc.port)
    if conflict:
        raise api.ValidationError(f"{PORT_FIELD}: {conflict}")
    return rt
