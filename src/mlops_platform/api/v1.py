"""``mlops.platform/v1`` InferenceService: the storage version and the conversion hub.

What v1 fixes in v1alpha1 (design and field mapping: ``docs/api-versions.md``):

- a ``predictor`` block: the model (``model.uri`` and its ``model.format``), a ``runtime`` reference
  to any entry of the runtime table (the built-in ``triton``, ``seldon``, ``torchserve`` or one a
  platform team adds) instead of a three-value enum, the port, Kubernetes ``ResourceRequirements``
  (any resource, GPUs included) instead of four strings and a GPU count, and an ``autoscaling``
  block (replica bounds, utilization targets, the scale-to-zero policy);
- the canary is an explicit candidate with its own model and a traffic percent;
- monitoring, network policy and the traffic router are first-class fields (v1alpha1 and v1beta1
  carry them under ``spec.extensions``).

The conversion webhook (:mod:`mlops_platform.api.conversion`) converts every served version to and
from this one; the reconciler reads only v1 (:func:`mlops_platform.api.v1_decode.to_internal`). The
types follow v1alpha1's contract: msgspec Structs whose errors name the field, the CRD schema
generated from them, every cross-field rule enforced twice (CEL, :mod:`mlops_platform.api.v1_rules`,
and :func:`mlops_platform.api.v1_decode.validate`).

This module holds the types (the schema); :mod:`~mlops_platform.api.v1_rules` the patterns and CEL
rules; :mod:`~mlops_platform.api.v1_decode` decoding, validation and the internal model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from mlops_platform.api import internal, isvc_status, modeluri, v1_analysis, v1_rules, v1alpha1

GROUP = v1alpha1.GROUP
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = v1alpha1.KIND
ValidationError = v1alpha1.ValidationError
Quantity = v1alpha1.Quantity
ROOT_RULES = v1alpha1.ROOT_RULES
MODEL_URI_PATTERN = v1alpha1.MODEL_URI_PATTERN


#: a Prometheus duration such as 30s, 5m, 1h30m (non-empty)
Duration = Annotated[str, Meta(pattern=internal.DURATION_PATTERN, min_length=1, max_length=32)]
_Runtime = Annotated[str, Meta(pattern=v1_rules.RUNTIME_PATTERN, max_length=63)]
_Format = Annotated[str, Meta(pattern=v1_rules.FORMAT_PATTERN, max_length=63)]
_ResourceList = Annotated[
    dict[str, Quantity],
    Meta(
        max_length=v1_rules.MAX_RESOURCES,
        extra_json_schema={"x-kubernetes-validations": v1_rules.RESOURCE_LIST_RULES},
    ),
]

#: the default autoscaling block, whole: the server checks a default against the CEL rules as it is
_DEFAULT_SCALING = {"minReplicas": 1, "maxReplicas": 1}


class _Base(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    pass


class ModelStorage(_Base):
    """How the storage initializer reaches a remote model (``docs/model-delivery.md``)."""

    secret_name: Annotated[
        Annotated[str, Meta(pattern=v1_rules.SUBDOMAIN_PATTERN, max_length=253)] | None,
        Meta(
            description="A Secret of this namespace with the credentials (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, GOOGLE_SERVICE_ACCOUNT_KEY, HTTP_AUTHORIZATION, ...), mounted "
            "read-only into the storage initializer only; the operator never reads it."
        ),
    ] = None
    endpoint: Annotated[
        Annotated[str, Meta(pattern=v1_rules.ENDPOINT_PATTERN, max_length=2048)] | None,
        Meta(description="An S3-compatible endpoint (s3://) or a GCS endpoint (gs://); default: the cloud's"),
    ] = None
    region: Annotated[
        Annotated[str, Meta(pattern=v1_rules.REGION_PATTERN, max_length=63)] | None,
        Meta(description="The S3 region (s3://); default: the Secret's AWS_REGION, else us-east-1."),
    ] = None


class Model(_Base):
    """A model artifact: where it is and what format it is in, and how it is downloaded."""

    uri: Annotated[
        str,
        Meta(
            pattern=MODEL_URI_PATTERN,
            max_length=2048,
            description="Where the model is: s3://, gs://, pvc://, http(s):// or file:// URI.",
            extra_json_schema={"x-kubernetes-validations": modeluri.cel_rules()},
        ),
    ]
    format: Annotated[
        _Format | None,
        Meta(
            description="The model's format (onnx, pytorch, tensorflow, sklearn, xgboost, ...); checked "
            "against the runtime's formats (docs/serving-runtimes.md)."
        ),
    ] = None
    sha256: Annotated[
        Annotated[str, Meta(pattern=v1_rules.SHA256_PATTERN)] | None,
        Meta(
            description="The SHA-256 (hex) of the downloaded file or archive; a mismatch fails the "
            "download (ModelDownloadFailed)."
        ),
    ] = None
    storage: Annotated[
        ModelStorage | None,
        Meta(description="Credentials, endpoint and region of a downloaded model's store."),
    ] = None


#: a model field, with its cross-field rules
ModelField = Annotated[Model, Meta(extra_json_schema={"x-kubernetes-validations": v1_rules.MODEL_RULES})]


class ResourceRequirements(_Base):
    """Compute resources of each replica, as in a Kubernetes container: any resource name, GPUs
    included (``nvidia.com/gpu`` in limits); quantities as strings ("500m", "1Gi") or integers."""

    requests: Annotated[_ResourceList | None, Meta(description="Minimum resources per replica.")] = None
    limits: Annotated[_ResourceList | None, Meta(description="Maximum resources per replica.")] = None


class TargetUtilization(_Base):
    """Average utilization targets, in percent of the request (HorizontalPodAutoscaler resource metrics)."""

    cpu: Annotated[
        Annotated[int, Meta(ge=1, le=1000)] | None,
        Meta(description="CPU target (default: the runtime's, usually 80)."),
    ] = None
    memory: Annotated[
        Annotated[int, Meta(ge=1, le=1000)] | None, Meta(description="Memory target (default: none).")
    ] = None


class ScaleToZero(_Base):
    """How a service with minReplicas 0 wakes and sleeps (a KEDA ScaledObject, when KEDA is installed)."""

    requests_per_replica: Annotated[
        Annotated[float, Meta(gt=0)] | None,
        Meta(description="Requests per second per replica the scaler aims at (default: the operator's)."),
    ] = None
    cooldown_seconds: Annotated[
        Annotated[int, Meta(ge=0, le=86400)] | None,
        Meta(description="Seconds without requests before scaling back to zero."),
    ] = None


class ReplicaBounds(_Base):
    """Replica bounds (v1beta1 has the same, with its own targets)."""

    min_replicas: Annotated[
        int,
        Meta(
            ge=0,
            le=1000,
            description="Minimum replicas (<= maxReplicas); 0 scales the service to zero. The scale "
            "subresource sets this field.",
        ),
    ] = 1
    max_replicas: Annotated[
        int,
        Meta(ge=1, le=1000, description="Maximum replicas; an autoscaler is created when > minReplicas."),
    ] = 1


class Autoscaling(ReplicaBounds):
    """Replica bounds and how replicas follow load."""

    target_utilization: TargetUtilization | None = None
    scale_to_zero: ScaleToZero | None = None


class PredictorBase(_Base):
    """What serves the stable model, but for autoscaling (v1beta1 has the same, with its own)."""

    model: ModelField
    runtime: Annotated[
        _Runtime,
        Meta(
            description="The runtime table entry that serves the model: triton, seldon, torchserve, or "
            "one the platform team added (docs/serving-runtimes.md)."
        ),
    ]
    port: Annotated[
        int, Meta(ge=1, le=65535, description="Port the model server listens on for inference.")
    ] = 8080
    resources: Annotated[
        ResourceRequirements | None,
        Meta(extra_json_schema={"x-kubernetes-validations": v1_rules.RESOURCES_RULES}),
    ] = None
    service_account_name: Annotated[
        Annotated[str, Meta(pattern=v1_rules.SUBDOMAIN_PATTERN, max_length=253)] | None,
        Meta(
            description="The ServiceAccount the model-server pods run as (workload identity for the "
            "model's bucket); default: the namespace's default."
        ),
    ] = None


class Predictor(PredictorBase):
    """The model server that serves the stable model."""

    autoscaling: Annotated[
        Autoscaling,
        Meta(
            extra_json_schema={
                "x-kubernetes-validations": v1_rules.AUTOSCALING_RULES,
                "default": _DEFAULT_SCALING,
            }
        ),
    ] = msgspec.field(default_factory=Autoscaling)


class Canary(_Base):
    """A candidate model served beside the predictor (same runtime and resources) with a traffic share,
    set by hand (``trafficPercent``) or step by step by an ``analysis`` of its live metrics. Its model
    downloads with its own ``storage``, else the predictor's."""

    model: ModelField
    traffic_percent: Annotated[
        int,
        Meta(
            ge=0,
            le=100,
            description="Percent of requests (0-100) routed to the candidate; 0 with an analysis.",
        ),
    ] = 0
    analysis: v1_analysis.AnalysisField = None


#: a canary field, with its cross-field rules
CanaryField = Annotated[
    Canary | None, Meta(extra_json_schema={"x-kubernetes-validations": v1_analysis.CANARY_RULES})
]


class Alerts(_Base):
    """Alert thresholds of this service; unset keeps the operator's defaults (docs/monitoring.md)."""

    error_ratio: Annotated[float, Meta(gt=0, le=1)] | None = None
    latency_seconds: Annotated[float, Meta(gt=0)] | None = None
    for_: Duration | None = msgspec.field(default=None, name="for")
    below_min_for: Duration | None = None


class Monitoring(_Base):
    """PrometheusRule and ServiceMonitor of this service (docs/monitoring.md)."""

    enabled: Annotated[bool | None, Meta(description="Default: the operator's --monitoring.")] = None
    alerts: Alerts | None = None


class NetworkPolicy(_Base):
    """A NetworkPolicy admitting only the serving ports (docs/network-policy.md)."""

    enabled: Annotated[bool | None, Meta(description="Default: the operator's --network-policy.")] = None


class Routing(_Base):
    """How the canary's share is routed (docs/canary.md)."""

    router: Annotated[
        Literal["auto", "istio", "gateway-api", "replicas"] | None,
        Meta(description="Default: the operator's --traffic-router."),
    ] = None


class InferenceServiceSpec(_Base):
    """The desired model service."""

    predictor: Predictor
    canary: CanaryField = None
    monitoring: Monitoring | None = None
    network_policy: NetworkPolicy | None = None
    routing: Routing | None = None
    extensions: Annotated[
        dict[str, Any] | None,
        Meta(
            description="Reserved for forward evolution: unknown keys are preserved and ignored.",
            extra_json_schema={"x-kubernetes-preserve-unknown-fields": True},
        ),
    ] = None


class InferenceService(msgspec.Struct, rename="camel", omit_defaults=True):
    """InferenceService is one model service: predictor Deployment, Service, autoscaler and more."""

    metadata: dict[str, Any]
    spec: InferenceServiceSpec
    api_version: str = API_VERSION
    kind: str = KIND
    status: isvc_status.InferenceServiceStatus = msgspec.field(
        default_factory=isvc_status.InferenceServiceStatus
    )

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")


#: the keys v1alpha1 and v1beta1 keep under ``spec.extensions`` and v1 has as fields
GRADUATED: dict[str, type[msgspec.Struct]] = {
    "monitoring": Monitoring,
    "networkPolicy": NetworkPolicy,
    "traffic": Routing,
}
#: the v1 field of each graduated extension key
GRADUATED_FIELD = {"monitoring": "monitoring", "networkPolicy": "networkPolicy", "traffic": "routing"}


class StorageExtension(_Base):
    """v1alpha1's ``spec.extensions.storage``: how its ``modelUri`` is downloaded. v1beta1 and v1 say
    it as fields: ``spec.predictor.model.sha256``, ``spec.predictor.model.storage`` and
    ``spec.predictor.serviceAccountName``."""

    secret_name: Annotated[str, Meta(pattern=v1_rules.SUBDOMAIN_PATTERN, max_length=253)] | None = None
    endpoint: Annotated[str, Meta(pattern=v1_rules.ENDPOINT_PATTERN, max_length=2048)] | None = None
    region: Annotated[str, Meta(pattern=v1_rules.REGION_PATTERN, max_length=63)] | None = None
    sha256: Annotated[str, Meta(pattern=v1_rules.SHA256_PATTERN)] | None = None
    service_account_name: Annotated[str, Meta(pattern=v1_rules.SUBDOMAIN_PATTERN, max_length=253)] | None = (
        None
    )


#: v1alpha1's extension key of :class:`StorageExtension`
STORAGE_EXTENSION = "storage"
#: where v1 says each key of :class:`StorageExtension`
STORAGE_FIELDS = {
    "secretName": "spec.predictor.model.storage.secretName",
    "endpoint": "spec.predictor.model.storage.endpoint",
    "region": "spec.predictor.model.storage.region",
    "sha256": "spec.predictor.model.sha256",
    "serviceAccountName": "spec.predictor.serviceAccountName",
}
