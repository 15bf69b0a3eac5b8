"""The runtime table: which model server image runs a runtime, and how.

Contract:
- :func:`default_table` gives real upstream images pinned to a release tag, each server's own
  command line, ports, health endpoints, the model formats it serves and the dialect of its
  request metrics (sources and caveats: ``docs/serving-runtimes.md``).
- Command, args and env values are templates: ``{port}`` (``spec.predictor.port``), ``{model_dir}``
  and ``{<name>_port}`` for every named port of the runtime are substituted by :func:`render`;
  ``{{``/``}}`` are literal braces.
- :func:`load_overrides` merges a ConfigMap's ``data`` (key ``runtimes.yaml``) over a table, and
  adds the new runtimes it defines (``basedOn`` an entry, or a full definition); it is pure and
  raises :class:`ServingRuntimeError` naming the offending key. A bad ConfigMap never yields a
  half-merged table.
- :func:`validate` is what only the table can tell about an InferenceService (its runtime exists,
  serves the declared model formats, does not bind its port): the reconciler and ``why`` call it.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args

import msgspec
import yaml
from msgspec import Meta

from mlops_platform import api
from mlops_platform.api import internal
from mlops_platform.runtime import quantity as quantity_

CONFIG_KEY = "runtimes.yaml"
DEFAULT_MODEL_DIR = "/mnt/models"
_PORT_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,13}[a-z0-9])?$")  # IANA_SVC_NAME, 15 chars max
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
#: a runtime name: a DNS label (it becomes the ``mlops.platform/framework`` label value)
RUNTIME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_RUNTIME_NAME = 63
#: a model format name, lowercase as KServe spells them (``onnx``, ``sklearn``, ``alibi-detect``)
_FORMAT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: a label value (``app.kubernetes.io/name`` carries the server software)
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

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


class ServingRuntimeError(ValueError):
    """An invalid runtime override; the message names the key (``runtimes.yaml: triton.image``)."""


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

    def placeholders(self, port: int) -> dict[str, str]:
        values = {"port": str(port), "model_dir": self.model_dir}
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
# liveness fails after 3 x 10 s; startup allows 300 x 2 s = 10 min for model loading before it
_STARTUP_FAILURES = 300
#: the startup probe looks every 2 s (300 x 2 s = 10 minutes for loading): a pod is Ready within ~2 s
#: of its model loaded (every 10 s added up to 10 s to each cold start: bench/serving.py)
_STARTUP_PERIOD = 2
_TS_CONFIG = (
    "mkdir -p /tmp/ts && printf '%s\\n'"
    " 'inference_address=http://0.0.0.0:{port}'"
    " 'management_address=http://127.0.0.1:{management_port}'"
    " 'metrics_address=http://0.0.0.0:{metrics_port}' 'metrics_mode=prometheus'"
    " 'grpc_inference_port={grpc_port}' 'grpc_management_port={grpc_management_port}'"
    " > /tmp/ts/config.properties"
    " && exec torchserve --start --foreground --ncs --disable-token-auth"
    " --model-store={model_dir} --models=all --ts-config=/tmp/ts/config.properties"
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
    startup_v2 = Probe("/v2/health/live", period_seconds=_STARTUP_PERIOD, failure_threshold=_STARTUP_FAILURES)
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
    mlserver = ServingRuntime(
        server="mlserver",
        image="docker.io/seldonio/mlserver:1.7.1",
        args=("mlserver", "start", "{model_dir}"),
        env=_frozen(
            MLSERVER_HTTP_PORT="{port}",
            MLSERVER_GRPC_PORT="{grpc_port}",
            MLSERVER_METRICS_PORT="{metrics_port}",
            MLSERVER_MODELS_DIR="{model_dir}",
        ),
        ports=MappingProxyType({"grpc": 8081, "metrics": 8082}),
        readiness_probe=ready_v2,
        liveness_probe=live_v2,
        startup_probe=startup_v2,
        run_as_user=1000,  # the image declares USER 1000
        formats=MLSERVER_FORMATS,
        metrics_dialect="seldon",
        model_layout="mlserver",
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
        startup_probe=Probe("/ping", period_seconds=_STARTUP_PERIOD, failure_threshold=_STARTUP_FAILURES),
        run_as_user=1000,  # USER model-server is a name: the kubelet needs a uid to check non-root
        formats=TORCHSERVE_FORMATS,
        metrics_dialect="torchserve",
        model_layout="torchserve",
    )
    return MappingProxyType({"triton": triton, "seldon": mlserver, "torchserve": torchserve})


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


# -- overrides -------------------------------------------------------------------------------------


class _Struct(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    pass


Positive = Annotated[int, Meta(ge=1)]
Image = Annotated[str, Meta(min_length=1, pattern=r"^\S+$")]
AbsolutePath = Annotated[str, Meta(pattern=r"^/")]


class _ProbeOverride(_Struct):
    path: AbsolutePath | None = None
    period_seconds: Positive | None = None
    timeout_seconds: Positive | None = None
    failure_threshold: Positive | None = None


class _Toleration(_Struct):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class _Override(_Struct):
    based_on: str | None = None
    server: str | None = None
    image: Image | None = None
    gpu_image: Image | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    ports: dict[str, int] | None = None
    readiness_probe: _ProbeOverride | None = None
    liveness_probe: _ProbeOverride | None = None
    startup_probe: _ProbeOverride | None = None
    run_as_user: Annotated[int, Meta(ge=0)] | None = None
    run_as_non_root: bool | None = None
    default_requests: dict[str, str | int] | None = None
    metrics_path: AbsolutePath | None = None
    model_dir: AbsolutePath | None = None
    target_cpu_utilization: Positive | None = None
    termination_grace_period_seconds: Annotated[int, Meta(ge=0)] | None = None
    drain_seconds: Annotated[int, Meta(ge=0)] | None = None
    progress_deadline_seconds: Positive | None = None
    formats: list[str] | None = None
    metrics_dialect: MetricsDialect | None = None
    model_layout: ModelLayout | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[_Toleration] | None = None


#: what a runtime defined from scratch (no ``basedOn``) must say, by key
_REQUIRED = ("image", "args or command", "readinessProbe.path", "livenessProbe.path", "metricsDialect")


def load_overrides(data: Mapping[str, Any], base: ServingRuntimeTable | None = None) -> ServingRuntimeTable:
    """``base`` (default: :func:`default_table`) with a ConfigMap's ``data`` merged over it.

    ``data[runtimes.yaml]`` maps a runtime name to fields (camelCase, as in a Kubernetes
    manifest). For an entry of ``base`` they override it: probes merge field by field, maps (env,
    ports) key by key, lists (command, args, formats) are replaced. A new name (a DNS label) adds a
    runtime: ``basedOn: <entry>`` inherits everything of that entry (as this document leaves it)
    and merges its fields the same way; without ``basedOn`` it is a full definition, which must
    give :data:`_REQUIRED`. Raises :class:`ServingRuntimeError` naming the bad key.
    """
    table = dict(base if base is not None else default_table())
    for key in data:
        if key != CONFIG_KEY:
            raise ServingRuntimeError(f"{key}: unknown key (expected {CONFIG_KEY})")
    text = data.get(CONFIG_KEY)
    if text is None:
        return MappingProxyType(table)
    if not isinstance(text, str):
        raise ServingRuntimeError(f"{CONFIG_KEY}: expected YAML text, got {type(text).__name__}")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ServingRuntimeError(f"{CONFIG_KEY}: invalid YAML: {e}") from None
    if doc is None:
        return MappingProxyType(table)
    if not isinstance(doc, dict):
        raise ServingRuntimeError(f"{CONFIG_KEY}: expected a map of runtime name to its fields")
    entries: dict[str, tuple[_Override, Any]] = {}
    for name, raw in doc.items():
        where = f"{CONFIG_KEY}: {name}"
        if not isinstance(name, str) or len(name) > MAX_RUNTIME_NAME or not RUNTIME_NAME.match(name):
            raise ServingRuntimeError(
                f"{where}: not a valid runtime name (a DNS label: lowercase letters, digits and '-', "
                f"at most {MAX_RUNTIME_NAME} characters)"
            )
        _check_maps(raw, where)
        try:
            override = msgspec.convert(raw if raw is not None else {}, _Override, strict=True)
        except msgspec.ValidationError as e:
            raise ServingRuntimeError(_explain(e, where)) from None
        entries[name] = (override, raw)
    existing = frozenset(table)
    resolving: list[str] = []
    done: set[str] = set()

    def resolve(name: str) -> ServingRuntime:
        """The runtime ``name`` as this document leaves it (its base resolved first)."""
        if name in done or name not in entries:
            return table[name]
        where = f"{CONFIG_KEY}: {name}"
        if name in resolving:
            cycle = " -> ".join([*resolving[resolving.index(name) :], name])
            raise ServingRuntimeError(f"{where}.basedOn: a cycle ({cycle})")
        override, raw = entries[name]
        resolving.append(name)
        if name in existing:
            if override.based_on is not None:
                raise ServingRuntimeError(
                    f"{where}.basedOn: {name} already exists (its fields merge over it); basedOn is "
                    "for a new runtime"
                )
            start = table[name]
        elif override.based_on is not None:
            if override.based_on not in existing and override.based_on not in entries:
                known = ", ".join(sorted((existing | entries.keys()) - {name}))
                raise ServingRuntimeError(
                    f"{where}.basedOn: no runtime {override.based_on!r} (known: {known})"
                )
            start = resolve(override.based_on)
        else:
            start = _blank(name, override, raw, where)
        table[name] = _validate(_merge(start, override), where)
        resolving.pop()
        done.add(name)
        return table[name]

    for name in entries:
        resolve(name)
    return MappingProxyType(table)


def _blank(name: str, o: _Override, raw: Any, where: str) -> ServingRuntime:
    """The start of a runtime defined from scratch: the required keys checked, the rest defaulted
    (the startup probe: the liveness path every 2 s with 300 failures, as the built-in runtimes)."""
    for key in _REQUIRED:
        if not _given(raw, key):
            raise ServingRuntimeError(
                f"{where}.{key.replace(' or ', '/')}: required for a new runtime (or say basedOn: <runtime>)"
            )
    assert o.liveness_probe is not None and o.liveness_probe.path is not None  # required above
    live = o.liveness_probe.path
    return ServingRuntime(
        server=name,
        image="",
        args=(),
        ports=MappingProxyType({}),
        readiness_probe=Probe("/"),
        liveness_probe=Probe(live),
        startup_probe=Probe(live, period_seconds=_STARTUP_PERIOD, failure_threshold=_STARTUP_FAILURES),
    )


def _given(raw: Any, key: str) -> bool:
    """Whether ``raw`` gives ``key`` (``livenessProbe.path``: a nested one; ``args or command``: either)."""
    if " or " in key:
        return any(_given(raw, k) for k in key.split(" or "))
    value = raw
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value is not None and value != [] and value != ""


def _explain(e: msgspec.ValidationError, where: str) -> str:
    """``Expected `int` >= 1 - at `$.startupProbe.failureThreshold``` -> the key first."""
    message, sep, path = str(e).rpartition(" - at `$")
    if not sep:
        message, path = str(e), ""
    path = where + path.rstrip("`")
    unknown = re.fullmatch(r"Object contains unknown field `(.+)`", message)
    if unknown:
        return f"{path}.{unknown.group(1)}: unknown field"
    if path.endswith(".metricsDialect"):
        message += f" (expected one of {', '.join(METRICS_DIALECTS)})"
    if path.endswith(".modelLayout"):
        message += f" (expected one of {', '.join(MODEL_LAYOUTS)})"
    return f"{path}: {message}"


_MAP_VALUES: dict[str, tuple[type, ...]] = {
    "env": (str,),
    "ports": (int,),
    "defaultRequests": (str, int),
    "nodeSelector": (str,),
}


def _check_maps(raw: Any, where: str) -> None:
    """Type-check map values here: msgspec's errors do not name the map key."""
    for field, types in _MAP_VALUES.items():
        value = raw.get(field) if isinstance(raw, dict) else None
        for k, v in value.items() if isinstance(value, dict) else ():
            if not isinstance(v, types) or isinstance(v, bool):
                want = " or ".join(t.__name__ for t in types)
                raise ServingRuntimeError(f"{where}.{field}.{k}: expected {want}, got {v!r} (quote strings)")


_NESTED = frozenset(
    {
        "based_on",
        "env",
        "ports",
        "default_requests",
        "readiness_probe",
        "liveness_probe",
        "startup_probe",
        "node_selector",
        "tolerations",
    }
)


def _merge(spec: ServingRuntime, o: _Override) -> ServingRuntime:
    changes: dict[str, Any] = {
        f.name: getattr(o, f.name)
        for f in msgspec.structs.fields(o)
        if getattr(o, f.name) is not None and f.name not in _NESTED
    }
    for name in ("command", "args", "formats"):
        if name in changes:
            changes[name] = tuple(changes[name])
    if o.env is not None:
        changes["env"] = MappingProxyType({**spec.env, **o.env})
    if o.ports is not None:
        changes["ports"] = MappingProxyType({**spec.ports, **o.ports})
    if o.node_selector is not None:
        changes["node_selector"] = MappingProxyType({**spec.node_selector, **o.node_selector})
    if o.tolerations is not None:
        changes["tolerations"] = tuple(MappingProxyType(msgspec.to_builtins(t)) for t in o.tolerations)
    if o.default_requests is not None:
        changes["default_requests"] = MappingProxyType({k: str(v) for k, v in o.default_requests.items()})
    for name in ("readiness_probe", "liveness_probe", "startup_probe"):
        probe_override: _ProbeOverride | None = getattr(o, name)
        if probe_override is not None:
            fields = {k: v for k, v in msgspec.structs.asdict(probe_override).items() if v is not None}
            changes[name] = dataclasses.replace(getattr(spec, name), **fields)
    return dataclasses.replace(spec, **changes)


def _validate(spec: ServingRuntime, where: str) -> ServingRuntime:
    if not _LABEL_VALUE.match(spec.server):
        raise ServingRuntimeError(f"{where}.server: {spec.server!r} is not a valid label value")
    for i, model_format in enumerate(spec.formats):
        if not _FORMAT_NAME.match(model_format):
            raise ServingRuntimeError(
                f"{where}.formats[{i}]: {model_format!r} is not a format name (lowercase, as KServe's: onnx)"
            )
        if model_format in spec.formats[:i]:
            raise ServingRuntimeError(f"{where}.formats[{i}]: {model_format!r} is listed twice")
    for field, image in (("image", spec.image), ("gpuImage", spec.gpu_image)):
        if image is not None and not _pinned(image):
            raise ServingRuntimeError(
                f"{where}.{field}: {image!r} is not pinned (use a version tag or @sha256:)"
            )
    for name, number in spec.ports.items():
        if not _PORT_NAME.match(name) or name == "http":
            raise ServingRuntimeError(
                f"{where}.ports.{name}: not a valid port name (IANA service name, not http)"
            )
        if not 1 <= number <= 65535:
            raise ServingRuntimeError(f"{where}.ports.{name}: {number} is not a port number (1-65535)")
        users = [n for n, p in {**spec.ports, **spec.internal_ports}.items() if p == number]
        if len(users) > 1:
            raise ServingRuntimeError(
                f"{where}.ports.{name}: port {number} is used twice ({', '.join(users)})"
            )
    for name, quantity in spec.default_requests.items():
        if not quantity_.is_quantity(quantity):
            raise ServingRuntimeError(f"{where}.defaultRequests.{name}: {quantity!r} is not a quantity")
    _validate_placement(spec, where)
    if spec.drain_seconds and spec.drain_seconds >= spec.termination_grace_period_seconds:
        raise ServingRuntimeError(
            f"{where}.drainSeconds: {spec.drain_seconds} leaves the server no time to stop within "
            f"terminationGracePeriodSeconds {spec.termination_grace_period_seconds}"
        )
    for name in spec.env:
        if not _ENV_NAME.match(name):
            raise ServingRuntimeError(f"{where}.env.{name}: not a valid environment variable name")
    known = spec.placeholders(8080)
    templates = [(f"command[{i}]", t) for i, t in enumerate(spec.command)]
    templates += [(f"args[{i}]", t) for i, t in enumerate(spec.args)]
    for field, template in [*templates, *((f"env.{k}", v) for k, v in spec.env.items())]:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as e:
            raise ServingRuntimeError(f"{where}.{field}: {e}") from None
        unknown = [f for f in fields if f not in known]
        if unknown:
            choices = ", ".join("{" + k + "}" for k in sorted(known))
            raise ServingRuntimeError(
                f"{where}.{field}: unknown placeholder {{{unknown[0]}}} (known: {choices})"
            )
    return spec


def _validate_placement(spec: ServingRuntime, where: str) -> None:
    """``nodeSelector`` values are label values; a toleration without a key tolerates every taint
    (``operator: Exists``) and ``Exists`` takes no value, as the API server would say of the pods."""
    for key, value in spec.node_selector.items():
        if value and not _LABEL_VALUE.match(value):
            raise ServingRuntimeError(f"{where}.nodeSelector.{key}: {value!r} is not a valid label value")
    for i, t in enumerate(spec.tolerations):
        operator = t.get("operator", "Equal")
        if operator == "Exists" and t.get("value"):
            raise ServingRuntimeError(
                f"{where}.tolerations[{i}].value: must be empty when operator is Exists"
            )
        if not t.get("key") and operator != "Exists":
            raise ServingRuntimeError(f"{where}.tolerations[{i}].operator: must be Exists when key is empty")


def _pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest")
