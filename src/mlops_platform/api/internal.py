"""The internal model of an InferenceService: what the controller reads, whatever version was served.

Every served API version converts to this model (``v1alpha1.to_internal``); builders and the
reconciler read only this, never a versioned type, so a new API version adds one conversion and
touches no builder. It is the future hub of the conversion webhook: it holds the union of what the
versions can say (generic resource requirements rather than v1alpha1's four strings, for example).

Values here are already validated and defaulted; the model is immutable and cheap to build.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

GPU_RESOURCE = "nvidia.com/gpu"
#: a Prometheus duration (``model.ParseDuration``): units from largest to smallest, each at most once
DURATION_PATTERN = (
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceRequirements:
    """Requests and limits per resource name (``cpu``, ``memory``, ``nvidia.com/gpu``, ...), as quantities."""

    requests: Mapping[str, str] = dataclasses.field(default_factory=_empty)
    limits: Mapping[str, str] = dataclasses.field(default_factory=_empty)

    @property
    def gpus(self) -> int:
        """GPUs per replica (the ``nvidia.com/gpu`` limit, 0 without)."""
        return int(self.limits.get(GPU_RESOURCE, self.requests.get(GPU_RESOURCE, "0")))


@dataclasses.dataclass(frozen=True, slots=True)
class ModelStorage:
    """How the storage initializer reaches a remote model (``docs/model-delivery.md``); the predictor
    and a canary share it. The operator never reads the Secret: the pod mounts it."""

    #: a Secret in the InferenceService's namespace holding the credentials (keys per scheme),
    #: mounted read-only into the storage initializer only; None: the pod's ServiceAccount (workload
    #: identity) or anonymous access
    secret_name: str | None = None
    #: an S3-compatible endpoint (``s3://``) or a GCS JSON API endpoint (``gs://``, an emulator);
    #: None: the cloud's own
    endpoint: str | None = None
    #: the S3 region; None: the Secret's ``AWS_REGION``, else ``us-east-1``
    region: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class AnalysisStep:
    """One step of an analysis: the candidate's ``weight`` (percent) for ``interval`` (as written, a
    PromQL range such as ``1m30s``; ``seconds`` the same in seconds)."""

    weight: int
    interval: str
    seconds: int


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorRatioCheck:
    """Bounds of the candidate's error ratio: absolute (``max``) and/or the stable's plus a margin."""

    max: float | None = None
    max_above_stable: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class LatencyCheck:
    """Bounds of the candidate's latency (seconds): absolute and/or a multiple of the stable's."""

    quantile: float = 0.99
    max_seconds: float | None = None
    max_times_stable: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class QueryCheck:
    """A custom PromQL check; ``comparison`` is one of ``v1_analysis.COMPARISONS``."""

    name: str
    query: str
    comparison: str
    threshold: float


@dataclasses.dataclass(frozen=True, slots=True)
class Analysis:
    """Progressive delivery of a canary (``spec.canary.analysis``, ``docs/progressive-delivery.md``).

    ``spec_hash`` identifies the canary spec it runs for (``v1_analysis.spec_hash``: the candidate's
    model and this analysis, but not ``paused``); a new one restarts the analysis."""

    steps: tuple[AnalysisStep, ...]
    min_requests: int = 20
    failure_limit: int = 1
    error_ratio: ErrorRatioCheck | None = None
    latency: LatencyCheck | None = None
    queries: tuple[QueryCheck, ...] = ()
    paused: bool = False
    spec_hash: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Traffic:
    """A canary: ``percent`` of requests to the candidate ``version`` (routing: the canary issue).

    ``model_uri`` is the candidate's model URI, resolved from ``version`` (``v1alpha1.resolve_canary``:
    the version itself when it is a URI, else ``modelUri`` with its last path segment replaced)."""

    version: str | None = None
    percent: int = 0
    model_uri: str | None = None
    #: the candidate's model format (v1beta1/v1 ``spec.canary.model.format``); None: not declared
    model_format: str | None = None
    #: the SHA-256 (hex) the candidate's artifact must have (v1beta1/v1 ``spec.canary.model.sha256``)
    model_sha256: str | None = None
    #: how the candidate's model is downloaded: its own ``spec.canary.model.storage``, else the
    #: predictor's (resolved by the API: builders read this one)
    storage: ModelStorage = ModelStorage()
    #: progressive delivery (v1beta1/v1 ``spec.canary.analysis``); None: the percent is set by hand
    analysis: Analysis | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Autoscaling:
    """Metric targets and the scale-to-zero policy; None keeps the runtime's or operator's default.

    ``cpu_utilization``/``memory_utilization`` are the HPA's average utilization targets in percent
    of the request (None: the runtime table's CPU target; no memory metric). ``requests_per_replica``
    and ``cooldown_seconds`` are the KEDA ScaledObject's threshold and cooldown when the service
    scales to zero (None: ``--keda-requests-per-replica`` and the built-in cooldown)."""

    cpu_utilization: int | None = None
    memory_utilization: int | None = None
    requests_per_replica: float | None = None
    cooldown_seconds: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class AlertOverrides:
    """Per-InferenceService alert thresholds; None keeps the operator's default."""

    error_ratio: float | None = None
    latency_seconds: float | None = None
    for_: str | None = None
    below_min_for: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Monitoring:
    """PrometheusRule + ServiceMonitor. ``enabled`` None: the operator default (on)."""

    enabled: bool | None = None
    alerts: AlertOverrides = AlertOverrides()


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkPolicy:
    """Ingress restricted to the serving ports. ``enabled`` None: the operator default (off)."""

    enabled: bool | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class InferenceService:
    name: str
    namespace: str
    uid: str
    generation: int
    #: the runtime table key of the model server (``triton``, ``seldon``, ``torchserve``, or an entry
    #: a platform team added); v1beta1/v1 ``spec.predictor.runtime``, v1alpha1 ``spec.framework``
    framework: str
    model_uri: str
    #: the model format (``onnx``, ``pytorch``, ...), checked against the runtime's formats; None: undeclared
    model_format: str | None = None
    #: the SHA-256 (hex) the downloaded artifact must have (the file, or the archive before
    #: unpacking); None: not verified
    model_sha256: str | None = None
    storage: ModelStorage = ModelStorage()
    #: the ServiceAccount the model-server pods run as (workload identity for the model's bucket);
    #: None: the namespace's default, with no API token mounted
    service_account_name: str | None = None
    port: int = 8080
    min_replicas: int = 1
    max_replicas: int = 1
    resources: ResourceRequirements = ResourceRequirements()
    autoscaling: Autoscaling = Autoscaling()
    traffic: Traffic | None = None
    monitoring: Monitoring = Monitoring()
    network_policy: NetworkPolicy = NetworkPolicy()
    #: the canary router of this InferenceService (auto|istio|gateway-api|replicas); None: the operator's
    router: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
