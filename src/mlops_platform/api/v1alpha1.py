"""``mlops.platform/v1alpha1`` InferenceService: one manifest for a whole model-inference service.

The types are msgspec Structs: they decode straight from the API server's JSON with type and range
checks whose errors name the field (``... - at `spec.port```), and the CRD's OpenAPI schema is
generated from them (``mlops_platform.api.crd``), so the docstrings and ``Meta`` descriptions below
are what ``kubectl explain`` shows. Field names are camelCase on the wire.

Contract: every rule is enforced twice, identically — by the server (the CRD schema and its CEL
rules ``SPEC_RULES`` / ``RESOURCES_RULES``) and by :func:`from_dict` (msgspec constraints plus
:func:`validate`). Quantities (``spec.resources.*``) accept a string or a non-negative integer on
the wire, like Kubernetes' int-or-string; in Python they are always ``str`` after decoding. The
status types, shared by every version, are :mod:`~mlops_platform.api.isvc_status`'.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from mlops_platform.api import isvc_status, modeluri
from mlops_platform.runtime import quantity

GROUP = "mlops.platform"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceService"
PLURAL = "inferenceservices"
SINGULAR = "inferenceservice"
SHORT_NAMES = ("isvc",)
CATEGORIES = ("mlops", "all")
#: the operator's name as the field manager of all its writes (and its managed-by label value)
FIELD_MANAGER = "mlops-platform"

#: a non-negative Kubernetes resource.Quantity (apimachinery's grammar without the sign)
QUANTITY_PATTERN = quantity.PATTERN
#: schemes a model can be fetched from
MODEL_URI_PATTERN = r"^(s3|gs|pvc|https?|file)://.+"
#: a canary version token: one path segment, replacing the last one of modelUri
CANARY_TOKEN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: a modelUri whose last path segment a version token can replace (a path after the host)
VERSIONED_URI_PATTERN = r"^[a-z0-9]+://[^/]*/+[^/].*$"

Framework = Literal["triton", "seldon", "torchserve"]
#: a quantity on the wire: "500m", "1Gi", or a plain non-negative integer (normalised to str)
Quantity = Annotated[str, Meta(pattern=QUANTITY_PATTERN, max_length=64)] | Annotated[int, Meta(ge=0)]


def _quantity_rule(request: str, limit: str) -> dict[str, str]:
    a, b = f"self.{request}", f"self.{limit}"
    return {
        "rule": f"!has({a}) || !has({b}) || !isQuantity(string({a})) || !isQuantity(string({b})) || "
        f"quantity(string({a})).compareTo(quantity(string({b}))) <= 0",
        "message": f"spec.resources.{request} must be <= spec.resources.{limit}",
        "fieldPath": f".{request}",
        "reason": "FieldValueInvalid",
    }


#: CEL rules of ``spec.resources`` (mirrored by :func:`validate`)
RESOURCES_RULES = [_quantity_rule("cpuRequest", "cpuLimit"), _quantity_rule("memoryRequest", "memoryLimit")]
#: every child is named ``<name>-predictor`` and carries the name in label values (63 characters)
MAX_NAME_LENGTH = 53
#: children are named ``<name>-predictor``: a Service name must be a DNS-1035 label
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: CEL rules of the whole object (mirrored by :func:`validate`)
ROOT_RULES = [
    {
        "rule": f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
        "message": f"metadata.name must be at most {MAX_NAME_LENGTH} characters (children: <name>-predictor)",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": f"self.metadata.name.matches('{NAME_PATTERN}')",
        "message": "metadata.name must start with a letter and hold only a-z, 0-9 and '-' (a DNS-1035 label)",
        "reason": "FieldValueInvalid",
    },
]
#: CEL rules of ``spec`` (mirrored by :func:`validate`)
SPEC_RULES = [
    {
        "rule": "self.minReplicas <= self.maxReplicas",
        "message": "spec.minReplicas must be <= spec.maxReplicas",
        "fieldPath": ".minReplicas",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.traffic) || self.traffic.canaryPercent == 0 || has(self.traffic.canaryVersion)",
        "message": "spec.traffic.canaryVersion is required when canaryPercent > 0",
        "fieldPath": ".traffic.canaryVersion",
        "reason": "FieldValueRequired",
    },
    {
        "rule": "!has(self.traffic) || !has(self.traffic.canaryVersion) || "
        "self.traffic.canaryVersion.contains('://') || "
        f"self.modelUri.matches('{VERSIONED_URI_PATTERN}')",
        "message": "spec.traffic.canaryVersion: a version token replaces the last path segment of "
        "spec.modelUri, which has none; give the candidate's full model URI instead",
        "fieldPath": ".traffic.canaryVersion",
        "reason": "FieldValueInvalid",
    },
]
#: CEL rules of ``spec.traffic`` (mirrored by :func:`validate`)
TRAFFIC_RULES = [
    {
        "rule": "!has(self.canaryVersion) || "
        f"(self.canaryVersion.contains('://') ? self.canaryVersion.matches('{MODEL_URI_PATTERN}') && "
        f"{modeluri.cel_condition('self.canaryVersion')} : "
        f"self.canaryVersion.size() <= 63 && self.canaryVersion.matches('{CANARY_TOKEN_PATTERN}'))",
        "message": "spec.traffic.canaryVersion must be a full model URI (s3://, gs://, pvc://, http(s)://, "
        "file://, with the rules of spec.modelUri) or a version token of up to 63 characters (letters, "
        "digits, '.', '_', '-')",
        "fieldPath": ".canaryVersion",
        "reason": "FieldValueInvalid",
    },
]


class _Base(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    pass


#: ``spec.extensions`` of v1alpha1 and v1beta1 (v1 has these keys as fields)
Extensions = Annotated[
    dict[str, Any] | None,
    Meta(
        description="Reserved for forward evolution: unknown keys are preserved and ignored. "
        "Known keys: monitoring {enabled, alerts {errorRatio, latencySeconds, for, belowMinFor}}, "
        "networkPolicy {enabled}, traffic {router: auto|istio|gateway-api|replicas} and storage "
        "{secretName, endpoint, region, sha256, serviceAccountName} (docs/monitoring.md, "
        "docs/network-policy.md, docs/canary.md, docs/model-delivery.md).",
        extra_json_schema={"x-kubernetes-preserve-unknown-fields": True},
    ),
]


class Resources(_Base):
    """Compute resources of each predictor replica (requests and limits of its container).

    Each is a Kubernetes quantity, as a string ("500m", "1Gi") or a plain integer; a request must
    not exceed its limit.
    """

    cpu_request: Annotated[Quantity | None, Meta(description="CPU request per replica, e.g. 500m.")] = None
    cpu_limit: Annotated[Quantity | None, Meta(description="CPU limit per replica, e.g. 2.")] = None
    memory_request: Annotated[Quantity | None, Meta(description="Memory request per replica, e.g. 1Gi.")] = (
        None
    )
    memory_limit: Annotated[Quantity | None, Meta(description="Memory limit per replica, e.g. 4Gi.")] = None

    def __post_init__(self) -> None:
        for field in self.__struct_fields__:
            value = getattr(self, field)
            if isinstance(value, int):
                setattr(self, field, str(value))


class Traffic(_Base):
    """Canary traffic split between the active model version and a canary version."""

    canary_version: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=2048,
                description="The candidate model that gets canaryPercent of the traffic (required if "
                "> 0): its full model URI, or a version token that replaces the last path segment of "
                "modelUri (gs://models/bert/7 with 8: gs://models/bert/8).",
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
            extra_json_schema={"x-kubernetes-validations": modeluri.cel_rules()},
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
            description="Minimum replicas (<= maxReplicas); 0 scales the service to zero (no pods, no "
            "autoscaler). The scale subresource sets this field.",
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
    resources: Annotated[
        Resources | None,
        Meta(extra_json_schema={"x-kubernetes-validations": RESOURCES_RULES}),
    ] = None
    traffic: Annotated[
        Traffic | None,
        Meta(extra_json_schema={"x-kubernetes-validations": TRAFFIC_RULES}),
    ] = None
    extensions: Extensions = None


class InferenceService(msgspec.Struct, rename="camel", omit_defaults=True):
    """InferenceService is one model service: predictor Deployment, Service, autoscaler and more."""

    metadata: dict[str, Any]
    spec: Annotated[
        InferenceServiceSpec,
        Meta(extra_json_schema={"x-kubernetes-validations": SPEC_RULES}),
    ]
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

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid") or "")

    @property
    def generation(self) -> int:
        return int(self.metadata.get("generation") or 0)


class ValidationError(ValueError):
    """Bad input, with the offending field named (``spec.port``)."""


_S = TypeVar("_S")


def decode_as(obj: Any, typ: type[_S], where: str = "") -> _S:
    """``obj`` decoded strictly as ``typ`` (any version's Struct); :class:`ValidationError` naming
    the field, under ``where`` when ``obj`` sits there (``spec.extensions.monitoring``)."""
    try:
        return msgspec.convert(obj, typ, strict=True)
    except msgspec.ValidationError as e:
        text = str(e)
        if not where:
            raise ValidationError(text.replace("`$.", "`")) from None
        if " - at `$" in text:
            text = text.replace("`$.", f"`{where}.").replace("`$`", f"`{where}`")
        else:
            text = f"{text} - at `{where}`"
        raise ValidationError(text) from None


def validate_name(name: str) -> None:
    """Children are ``<name>-predictor``: a DNS-1035 label of at most :data:`MAX_NAME_LENGTH`."""
    if not re.match(NAME_PATTERN, name):
        raise ValidationError(
            f"metadata.name {name!r} must be a DNS-1035 label: a letter, then a-z, 0-9, '-'"
        )
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationError(f"metadata.name must be at most {MAX_NAME_LENGTH} characters, got {len(name)}")


def from_dict(obj: dict[str, Any]) -> InferenceService:
    """Decode a JSON object (as served by the API server); raise :class:`ValidationError` naming the field."""
    isvc = decode_as(obj, InferenceService)
    validate(isvc)
    return isvc


def validate(isvc: InferenceService) -> None:
    """Cross-field rules (also enforced by the CRD's CEL rules on the server)."""
    validate_name(isvc.name)
    s = isvc.spec
    if s.min_replicas > s.max_replicas:
        raise ValidationError(
            f"spec.minReplicas ({s.min_replicas}) must be <= spec.maxReplicas ({s.max_replicas})"
        )
    if s.traffic is not None and s.traffic.canary_percent > 0 and not s.traffic.canary_version:
        raise ValidationError("spec.traffic.canaryVersion is required when spec.traffic.canaryPercent > 0")
    if s.traffic is not None and s.traffic.canary_version:
        resolve_canary(s.model_uri, s.traffic.canary_version)  # raises naming the field
    r = s.resources
    if r is None:
        return
    for request, limit, req_name, lim_name in (
        (r.cpu_request, r.cpu_limit, "cpuRequest", "cpuLimit"),
        (r.memory_request, r.memory_limit, "memoryRequest", "memoryLimit"),
    ):
        if request is not None and limit is not None and quantity.parse(request) > quantity.parse(limit):
            raise ValidationError(
                f"spec.resources.{req_name} ({request}) must be <= spec.resources.{lim_name} ({limit})"
            )


def resolve_canary(model_uri: str, canary_version: str) -> str:
    """The candidate's model URI: ``canary_version`` itself when it is a URI (same rules as
    ``modelUri``), else ``model_uri`` with its last path segment replaced by the version token
    (``gs://models/bert/7`` + ``8`` -> ``gs://models/bert/8``; a trailing ``/`` is kept). Raises
    :class:`ValidationError` naming ``spec.traffic.canaryVersion`` (the CEL rules say the same)."""
    if "://" in canary_version:
        if not re.match(MODEL_URI_PATTERN, canary_version):
            raise ValidationError(
                f"spec.traffic.canaryVersion {canary_version!r}: a model URI must be s3://, gs://, pvc://, "
                "http(s):// or file://"
            )
        return canary_version
    if len(canary_version) > 63 or not re.match(CANARY_TOKEN_PATTERN, canary_version):
        raise ValidationError(
            f"spec.traffic.canaryVersion {canary_version!r} must be a full model URI or a version token of "
            "up to 63 characters (letters, digits, '.', '_', '-'; no '/')"
        )
    if not re.match(VERSIONED_URI_PATTERN, model_uri):
        raise ValidationError(
            f"spec.traffic.canaryVersion {canary_version!r}: a version token replaces the last path segment "
            f"of spec.modelUri, and {model_uri!r} has none; give the candidate's full model URI instead"
        )
    scheme, _, rest = model_uri.partition("://")
    trailing = "/" if rest.endswith("/") else ""
    head = rest.rstrip("/").rpartition("/")[0]
    return f"{scheme}://{head}/{canary_version}{trailing}"
