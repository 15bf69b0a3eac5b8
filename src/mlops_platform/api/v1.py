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
from this one; the reconciler reads only v1 (:func:`to_internal`). The types follow v1alpha1's
contract: msgspec Structs whose errors name the field, the CRD schema generated from them, every
cross-field rule enforced twice (CEL and :func:`validate`).
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from mlops_platform.api import internal, modeluri, v1alpha1
from mlops_platform.runtime import quantity

GROUP = v1alpha1.GROUP
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = v1alpha1.KIND
ValidationError = v1alpha1.ValidationError
Quantity = v1alpha1.Quantity
ROOT_RULES = v1alpha1.ROOT_RULES
MODEL_URI_PATTERN = v1alpha1.MODEL_URI_PATTERN
#: a runtime table key: a DNS-1123 label (it is a label value on every child)
RUNTIME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: a model format name (``onnx``, ``pytorch``, ``tensorflow``, ``sklearn``, ...)
FORMAT_PATTERN = r"^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$"
#: a resource name (``cpu``, ``memory``, ``nvidia.com/gpu``, ``ephemeral-storage``): a qualified name
RESOURCE_NAME_PATTERN = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
MAX_RESOURCES = 16
#: a SHA-256 digest in lowercase hex (``sha256sum`` prints it)
SHA256_PATTERN = r"^[a-f0-9]{64}$"
#: a Secret or ServiceAccount name: a DNS-1123 subdomain
SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: an object store's endpoint: http(s)://host[:port][/path], no white space
ENDPOINT_PATTERN = r"^https?://[^\s/?#]+(/[^\s]*)?$"
#: a region name (``us-east-1``, ``eu-central-1``; an S3-compatible store may use any token)
REGION_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,62})$"
#: the schemes the storage initializer downloads (``api.modeluri.REMOTE``), as a CEL/schema regex
REMOTE_URI_PATTERN = r"^(s3|gs|https?)://"

#: a Prometheus duration such as 30s, 5m, 1h30m (non-empty)
Duration = Annotated[str, Meta(pattern=internal.DURATION_PATTERN, min_length=1, max_length=32)]
_Runtime = Annotated[str, Meta(pattern=RUNTIME_PATTERN, max_length=63)]
_Format = Annotated[str, Meta(pattern=FORMAT_PATTERN, max_length=63)]
#: CEL: the resource name ``k`` is an extended resource (``nvidia.com/gpu``, ``example.com/fpga``: a
#: domain other than kubernetes.io), which Kubernetes counts in whole units and never overcommits
_EXTENDED_CEL = "(k.contains('/') && !k.contains('kubernetes.io/'))"
#: CEL: Kubernetes overcommits the resource ``k`` (a native one but hugepages-*)
_OVERCOMMITTED_CEL = "((!k.contains('/') || k.contains('kubernetes.io/')) && !k.startsWith('hugepages-'))"
#: CEL rules of a resource list: its keys are resource names (the schema cannot say it of map keys)
RESOURCE_LIST_RULES = [
    {
        "rule": f"self.all(k, k.size() <= 253 && k.matches('{RESOURCE_NAME_PATTERN}'))",
        "message": "resource names must be qualified names such as cpu, memory or nvidia.com/gpu",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": f"self.all(k, !{_EXTENDED_CEL} || !isQuantity(string(self[k])) || "
        "quantity(string(self[k])).isInteger())",
        "message": "extended resources such as nvidia.com/gpu are counted in whole units",
        "reason": "FieldValueInvalid",
    },
]
_ResourceList = Annotated[
    dict[str, Quantity],
    Meta(max_length=MAX_RESOURCES, extra_json_schema={"x-kubernetes-validations": RESOURCE_LIST_RULES}),
]

#: CEL rules of ``resources`` (mirrored by :func:`validate`)
RESOURCES_RULES = [
    {
        "rule": "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || "
        "!isQuantity(string(self.requests[k])) || !isQuantity(string(self.limits[k])) || "
        "quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",
        "message": "every request in resources.requests must be <= its limit in resources.limits",
        "fieldPath": ".requests",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": f"!has(self.requests) || self.requests.all(k, {_OVERCOMMITTED_CEL} || (has(self.limits) && "
        "k in self.limits && (!isQuantity(string(self.requests[k])) || "
        "!isQuantity(string(self.limits[k])) || "
        "quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) == 0)))",
        "message": "a request of a resource Kubernetes does not overcommit (an extended resource such as "
        "nvidia.com/gpu, hugepages-*) needs a limit in resources.limits equal to it",
        "fieldPath": ".requests",
        "reason": "FieldValueInvalid",
    },
]


def extended_resource(name: str) -> bool:
    """An extended resource (``nvidia.com/gpu``): whole units, never overcommitted (Kubernetes'
    ``IsExtendedResourceName``)."""
    return "/" in name and "kubernetes.io/" not in name


def overcommitted(name: str) -> bool:
    """Whether Kubernetes lets a request of ``name`` be below its limit (``IsOvercommitAllowed``)."""
    return not extended_resource(name) and not name.startswith("hugepages-")


#: CEL rules of ``autoscaling`` (mirrored by :func:`validate`)
AUTOSCALING_RULES = [
    {
        "rule": "self.minReplicas <= self.maxReplicas",
        "message": "autoscaling.minReplicas must be <= autoscaling.maxReplicas",
        "fieldPath": ".minReplicas",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.scaleToZero) || self.minReplicas == 0",
        "message": "autoscaling.scaleToZero needs autoscaling.minReplicas: 0",
        "fieldPath": ".scaleToZero",
        "reason": "FieldValueInvalid",
    },
]


#: the default autoscaling block, whole: the server checks a default against the CEL rules as it is
_DEFAULT_SCALING = {"minReplicas": 1, "maxReplicas": 1}


class _Base(msgspec.Struct, rename="camel", omit_defaults=True, forbid_unknown_fields=True):
    pass


class ModelStorage(_Base):
    """How the storage initializer reaches a remote model (``docs/model-delivery.md``)."""

    secret_name: Annotated[
        Annotated[str, Meta(pattern=SUBDOMAIN_PATTERN, max_length=253)] | None,
        Meta(
            description="A Secret of this namespace with the credentials (AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY, GOOGLE_SERVICE_ACCOUNT_KEY, HTTP_AUTHORIZATION, ...), mounted "
            "read-only into the storage initializer only; the operator never reads it."
        ),
    ] = None
    endpoint: Annotated[
        Annotated[str, Meta(pattern=ENDPOINT_PATTERN, max_length=2048)] | None,
        Meta(description="An S3-compatible endpoint (s3://) or a GCS endpoint (gs://); default: the cloud's"),
    ] = None
    region: Annotated[
        Annotated[str, Meta(pattern=REGION_PATTERN, max_length=63)] | None,
        Meta(description="The S3 region (s3://); default: the Secret's AWS_REGION, else us-east-1."),
    ] = None


#: a downloaded model URI that names a directory (``modeluri.ModelURI.is_prefix``): a bucket's root,
#: a path ending in '/' (for http(s): path and query, before any fragment)
DIRECTORY_URI_RE2 = r"^(s3|gs)://([^/]*/?|.*/)$|^https?://([^#]*/|[^?#]*/\?)(#.*)?$"
#: CEL rules of a ``model`` (mirrored by :func:`validate`): download settings need a download
MODEL_RULES = [
    {
        "rule": f"!has(self.sha256) || self.uri.matches('{REMOTE_URI_PATTERN}')",
        "message": "model.sha256 is verified on download: only for s3://, gs:// and http(s):// models",
        "fieldPath": ".sha256",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": f"!has(self.sha256) || !self.uri.matches(r'{DIRECTORY_URI_RE2}')",
        "message": "model.sha256 verifies one file or archive, and the model URI names a directory (a "
        "bucket, or a path ending in '/')",
        "fieldPath": ".sha256",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": f"!has(self.storage) || self.uri.matches('{REMOTE_URI_PATTERN}')",
        "message": "model.storage is for downloaded models: s3://, gs:// and http(s)://",
        "fieldPath": ".storage",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.storage) || !has(self.storage.endpoint) || self.uri.matches('^(s3|gs)://')",
        "message": "model.storage.endpoint is for s3:// and gs:// models",
        "fieldPath": ".storage.endpoint",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.storage) || !has(self.storage.region) || self.uri.startsWith('s3://')",
        "message": "model.storage.region is for s3:// models",
        "fieldPath": ".storage.region",
        "reason": "FieldValueInvalid",
    },
]


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
        Annotated[str, Meta(pattern=SHA256_PATTERN)] | None,
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
ModelField = Annotated[Model, Meta(extra_json_schema={"x-kubernetes-validations": MODEL_RULES})]


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
        Meta(extra_json_schema={"x-kubernetes-validations": RESOURCES_RULES}),
    ] = None
    service_account_name: Annotated[
        Annotated[str, Meta(pattern=SUBDOMAIN_PATTERN, max_length=253)] | None,
        Meta(
            description="The ServiceAccount the model-server pods run as (workload identity for the "
            "model's bucket); default: the namespace's default."
        ),
    ] = None


class Predictor(PredictorBase):
    """The model server that serves the stable model."""

    autoscaling: Annotated[
        Autoscaling,
        Meta(extra_json_schema={"x-kubernetes-validations": AUTOSCALING_RULES, "default": _DEFAULT_SCALING}),
    ] = msgspec.field(default_factory=Autoscaling)


class Canary(_Base):
    """A candidate model served beside the predictor (same runtime and resources) with a traffic share.
    Its model downloads with its own ``storage``, else the predictor's."""

    model: ModelField
    traffic_percent: Annotated[
        int, Meta(ge=0, le=100, description="Percent of requests (0-100) routed to the candidate.")
    ] = 0


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
    canary: Canary | None = None
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
    status: v1alpha1.InferenceServiceStatus = msgspec.field(default_factory=v1alpha1.InferenceServiceStatus)

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

    secret_name: Annotated[str, Meta(pattern=SUBDOMAIN_PATTERN, max_length=253)] | None = None
    endpoint: Annotated[str, Meta(pattern=ENDPOINT_PATTERN, max_length=2048)] | None = None
    region: Annotated[str, Meta(pattern=REGION_PATTERN, max_length=63)] | None = None
    sha256: Annotated[str, Meta(pattern=SHA256_PATTERN)] | None = None
    service_account_name: Annotated[str, Meta(pattern=SUBDOMAIN_PATTERN, max_length=253)] | None = None


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


def from_dict(obj: dict[str, Any]) -> InferenceService:
    """Decode a v1 object; raise :class:`ValidationError` naming the field."""
    isvc = v1alpha1.decode_as(obj, InferenceService)
    validate(isvc)
    return isvc


def validate(isvc: InferenceService) -> None:
    """Cross-field rules (also enforced by the CRD's CEL rules on the server)."""
    v1alpha1.validate_name(isvc.name)
    p = isvc.spec.predictor
    a = p.autoscaling
    if a.min_replicas > a.max_replicas:
        raise ValidationError(
            f"spec.predictor.autoscaling.minReplicas ({a.min_replicas}) must be <= "
            f"spec.predictor.autoscaling.maxReplicas ({a.max_replicas})"
        )
    if a.scale_to_zero is not None and a.min_replicas != 0:
        raise ValidationError(
            "spec.predictor.autoscaling.scaleToZero needs spec.predictor.autoscaling.minReplicas: 0"
        )
    _validate_model(p.model, "spec.predictor.model")
    if isvc.spec.canary is not None:
        _validate_model(isvc.spec.canary.model, "spec.canary.model")
    r = p.resources
    for part in ("requests", "limits"):
        for name in getattr(r, part, None) or {}:
            if len(name) > 253 or not re.match(RESOURCE_NAME_PATTERN, name):
                raise ValidationError(
                    f"spec.predictor.resources.{part}: {name!r} is not a resource name such as cpu, "
                    "memory or nvidia.com/gpu"
                )
    for part in ("requests", "limits"):
        for name, value in (getattr(r, part, None) or {}).items():
            if extended_resource(name) and quantity.parse(str(value)) % 1:
                raise ValidationError(
                    f"spec.predictor.resources.{part}[{name}] ({value}): an extended resource is counted in "
                    "whole units"
                )
    if r is not None and r.requests:
        for name, request in r.requests.items():
            limit = (r.limits or {}).get(name)
            if limit is not None and quantity.parse(str(request)) > quantity.parse(str(limit)):
                raise ValidationError(
                    f"spec.predictor.resources.requests[{name}] ({request}) must be <= "
                    f"spec.predictor.resources.limits[{name}] ({limit})"
                )
            if not overcommitted(name) and (
                limit is None or quantity.parse(str(request)) != quantity.parse(str(limit))
            ):
                raise ValidationError(
                    f"spec.predictor.resources.requests[{name}] ({request}): Kubernetes does not overcommit "
                    f"{name}: spec.predictor.resources.limits[{name}] must be set and equal to it "
                    f"(it is {limit})"
                )


def _validate_model(m: Model, where: str) -> None:
    """The URI parses (:func:`modeluri.parse`) and the download settings fit its scheme (the CEL
    rules :data:`MODEL_RULES` say the same)."""
    try:
        uri = modeluri.parse(m.uri)
    except modeluri.ModelURIError as e:
        raise ValidationError(f"{where}.uri: {e}") from None
    if not uri.remote:
        for field, value in (("sha256", m.sha256), ("storage", m.storage)):
            if value is not None:
                raise ValidationError(
                    f"{where}.{field}: only for s3://, gs:// and http(s):// models (a {uri.scheme}:// "
                    "model is not downloaded)"
                )
        return
    if m.sha256 is not None and uri.is_prefix:
        raise ValidationError(
            f"{where}.sha256: verifies one file or archive; {m.uri!r} is a directory (drop the "
            "checksum or point at the file)"
        )
    st = m.storage
    if st is not None and st.endpoint is not None and uri.scheme not in ("s3", "gs"):
        raise ValidationError(f"{where}.storage.endpoint: is for s3:// and gs:// models, not {uri.scheme}://")
    if st is not None and st.region is not None and uri.scheme != "s3":
        raise ValidationError(f"{where}.storage.region: is for s3:// models, not {uri.scheme}://")


def _legacy_extensions(isvc: InferenceService) -> None:
    """v1 has monitoring, networkPolicy and routing as fields: the same keys under ``spec.extensions``
    (an object converted from an older version whose extension did not validate, or a v1 object
    written the old way) are reported, naming the field, never silently ignored."""
    for key, typ in GRADUATED.items():
        raw = (isvc.spec.extensions or {}).get(key)
        if raw is None:
            continue
        where = f"spec.extensions.{key}"
        v1alpha1.decode_as(raw, typ, where)  # an invalid one: the error names the field in it
        raise ValidationError(f"{where}: in v1 this is spec.{GRADUATED_FIELD[key]}; move it there")
    raw = (isvc.spec.extensions or {}).get(STORAGE_EXTENSION)
    if raw is not None:
        where = f"spec.extensions.{STORAGE_EXTENSION}"
        v1alpha1.decode_as(raw, StorageExtension, where)
        fields = ", ".join(sorted({STORAGE_FIELDS[k] for k in raw} or {"spec.predictor.model.storage"}))
        raise ValidationError(f"{where}: in v1beta1 and v1 these are fields ({fields}); move them there")


def _quantities(values: dict[str, Any] | None) -> MappingProxyType[str, str]:
    return MappingProxyType({k: str(v) for k, v in (values or {}).items()})


def to_internal(isvc: InferenceService) -> internal.InferenceService:
    """The internal model of a decoded, validated v1 object."""
    _legacy_extensions(isvc)
    s = isvc.spec
    p = s.predictor
    a = p.autoscaling
    r = p.resources or ResourceRequirements()
    target = a.target_utilization or TargetUtilization()
    zero = a.scale_to_zero or ScaleToZero()
    mon = s.monitoring or Monitoring()
    alerts = mon.alerts or Alerts()
    canary = s.canary
    return internal.InferenceService(
        name=isvc.name,
        namespace=isvc.namespace,
        uid=str(isvc.metadata.get("uid") or ""),
        generation=int(isvc.metadata.get("generation") or 0),
        framework=p.runtime,
        model_uri=p.model.uri,
        model_format=p.model.format,
        model_sha256=p.model.sha256,
        storage=_storage(p.model.storage),
        service_account_name=p.service_account_name,
        port=p.port,
        min_replicas=a.min_replicas,
        max_replicas=a.max_replicas,
        resources=internal.ResourceRequirements(_quantities(r.requests), _quantities(r.limits)),
        autoscaling=internal.Autoscaling(
            target.cpu, target.memory, zero.requests_per_replica, zero.cooldown_seconds
        ),
        traffic=None
        if canary is None
        else internal.Traffic(
            version_of(p.model.uri, canary.model.uri),
            canary.traffic_percent,
            canary.model.uri,
            canary.model.format,
            canary.model.sha256,
            _storage(canary.model.storage or p.model.storage),
        ),
        monitoring=internal.Monitoring(
            mon.enabled,
            internal.AlertOverrides(
                alerts.error_ratio, alerts.latency_seconds, alerts.for_, alerts.below_min_for
            ),
        ),
        network_policy=internal.NetworkPolicy((s.network_policy or NetworkPolicy()).enabled),
        router=(s.routing or Routing()).router,
    )


def _storage(st: ModelStorage | None) -> internal.ModelStorage:
    if st is None:
        return internal.ModelStorage()
    return internal.ModelStorage(st.secret_name, st.endpoint, st.region)


def version_of(stable_uri: str, candidate_uri: str) -> str:
    """How status names the candidate: the version token when its URI is the stable one with the last
    path segment replaced (``gs://m/bert/7`` -> ``gs://m/bert/8``: ``8``), else its whole URI."""
    stable_head = stable_uri.rstrip("/").rpartition("/")[0]
    cand_head, _, token = candidate_uri.rstrip("/").rpartition("/")
    if (
        stable_head
        and cand_head == stable_head
        and re.match(v1alpha1.CANARY_TOKEN_PATTERN, token)
        and len(token) <= 63
        and re.match(v1alpha1.VERSIONED_URI_PATTERN, stable_uri)
        and v1alpha1.resolve_canary(stable_uri, token) == candidate_uri
    ):
        return token
    return candidate_uri
