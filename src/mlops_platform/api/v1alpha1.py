"""``mlops.platform/v1alpha1`` InferenceService: one manifest for a whole model-inference service.

The types are msgspec Structs: they decode straight from the API server's JSON with type and range
checks whose errors name the field (``... - at `$.spec.port```), and the CRD's OpenAPI schema is
generated from them (``mlops_platform.api.crd``), so the docstrings and ``Meta`` descriptions below
are what ``kubectl explain`` shows. Field names are camelCase on the wire.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

GROUP = "mlops.platform"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceService"
PLURAL = "inferenceservices"
SINGULAR = "inferenceservice"
SHORT_NAMES = ("isvc",)
CATEGORIES = ("mlops", "all")

#: Kubernetes resource.Quantity (the apimachinery regular expression)
QUANTITY_PATTERN = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"  # noqa: E501
#: schemes a model can be fetched from
MODEL_URI_PATTERN = r"^(s3|gs|pvc|https?|file)://.+"

Framework = Literal["triton", "seldon", "torchserve"]


class _Base(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    pass


class Resources(_Base):
    """Compute resources of each predictor replica (requests and limits of its container)."""

    cpu_request: (
        Annotated[str, Meta(pattern=QUANTITY_PATTERN, description="CPU request per replica, e.g. 500m.")]
        | None
    ) = None
    cpu_limit: (
        Annotated[str, Meta(pattern=QUANTITY_PATTERN, description="CPU limit per replica, e.g. 2.")] | None
    ) = None
    memory_request: (
        Annotated[str, Meta(pattern=QUANTITY_PATTERN, description="Memory request per replica, e.g. 1Gi.")]
        | None
    ) = None
    memory_limit: (
        Annotated[str, Meta(pattern=QUANTITY_PATTERN, description="Memory limit per replica, e.g. 4Gi.")]
        | None
    ) = None


class Traffic(_Base):
    """Canary traffic split between the active model version and a canary version."""

    canary_version: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=63,
                description="Model version that gets canaryPercent of the traffic (required if > 0).",
            ),
        ]
        | None
    ) = None
    canary_percent: Annotated[
        int, Meta(ge=0, le=100, description="Percent of requests (0-100) routed to canaryVersion.")
    ] = 0


class InferenceServiceSpec(_Base):
    """The desired model service."""

    model_uri: Annotated[
        str,
        Meta(
            pattern=MODEL_URI_PATTERN,
            max_length=2048,
            description="Where the model is: s3://, gs://, pvc://, http(s):// or file:// URI.",
        ),
    ]
    framework: Annotated[Framework, Meta(description="Model server runtime: triton, seldon or torchserve.")]
    port: Annotated[
        int, Meta(ge=1, le=65535, description="Port the model server listens on for inference.")
    ] = 8080
    min_replicas: Annotated[
        int,
        Meta(
            ge=0,
            le=1000,
            description="Minimum replicas; 0 scales the service to zero (no pods, no autoscaler).",
        ),
    ] = 1
    max_replicas: Annotated[
        int,
        Meta(
            ge=1,
            le=1000,
            description="Maximum replicas; an autoscaler is created when it exceeds minReplicas.",
        ),
    ] = 1
    gpu_per_replica: Annotated[
        int, Meta(ge=0, le=16, description="nvidia.com/gpu per replica (0: CPU only).")
    ] = 0
    resources: Annotated[Resources | None, Meta(description=Resources.__doc__)] = None
    traffic: Annotated[Traffic | None, Meta(description=Traffic.__doc__)] = None
    extensions: Annotated[
        dict[str, Any] | None,
        Meta(description="Reserved for forward evolution; unknown fields are preserved and ignored."),
    ] = None


class Condition(msgspec.Struct, rename="camel", omit_defaults=True):
    """A metav1.Condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str = ""
    observed_generation: int | None = None


class InferenceServiceStatus(msgspec.Struct, rename="camel", omit_defaults=True):
    """The observed state, written by the operator only."""

    conditions: Annotated[
        list[Condition], Meta(description="Ready, Reconciled and one condition per child object.")
    ] = msgspec.field(default_factory=list)
    replicas: Annotated[int, Meta(description="Replicas of the predictor (all pods, ready or not).")] = 0
    ready_replicas: Annotated[int, Meta(description="Predictor replicas that are Ready.")] = 0
    replicas_summary: Annotated[
        str | None, Meta(description='"ready/desired" predictor replicas, for the Replicas printer column.')
    ] = None
    url: Annotated[
        str | None, Meta(description="Cluster-local URL, set only while the service can serve.")
    ] = None
    active_version: Annotated[
        str | None, Meta(description="The model (URI) actually rolled out and serving, not merely requested.")
    ] = None
    last_reconcile_time: Annotated[str | None, Meta(description="When the operator last reconciled.")] = None
    observed_generation: Annotated[int | None, Meta(description="The generation the status describes.")] = (
        None
    )
    selector: Annotated[
        str | None, Meta(description="Label selector of the predictor pods (scale subresource).")
    ] = None


class InferenceService(msgspec.Struct, rename="camel", omit_defaults=True):
    """InferenceService is one model service: predictor Deployment, Service, autoscaler and more."""

    metadata: dict[str, Any]
    spec: InferenceServiceSpec
    api_version: str = API_VERSION
    kind: str = KIND
    status: InferenceServiceStatus = msgspec.field(default_factory=InferenceServiceStatus)

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid") or "")

    @property
    def generation(self) -> int:
        return int(self.metadata.get("generation") or 0)


class ValidationError(ValueError):
    """Bad input, with the offending field named (``spec.port``)."""


def from_dict(obj: dict[str, Any]) -> InferenceService:
    """Decode a JSON object (as served by the API server); raise :class:`ValidationError` naming the field."""
    try:
        isvc = msgspec.convert(obj, InferenceService, strict=True)
    except msgspec.ValidationError as e:
        raise ValidationError(str(e).replace("`$.", "`")) from None
    validate(isvc)
    return isvc


def validate(isvc: InferenceService) -> None:
    """Cross-field rules (also enforced by the CRD's CEL rules on the server)."""
    s = isvc.spec
    if s.min_replicas > s.max_replicas:
        raise ValidationError(
            f"spec.minReplicas ({s.min_replicas}) must be <= spec.maxReplicas ({s.max_replicas})"
        )
    if s.traffic is not None and s.traffic.canary_percent > 0 and not s.traffic.canary_version:
        raise ValidationError("spec.traffic.canaryVersion is required when spec.traffic.canaryPercent > 0")


def to_dict(isvc: InferenceService) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(isvc)
    return out
