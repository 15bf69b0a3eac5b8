"""v1's validation vocabulary, shared by its schema (:mod:`mlops_platform.api.v1`), its decoding
(:mod:`mlops_platform.api.v1_decode`) and v1beta1: the patterns and bounds of its strings and
resource lists, and the CEL rules the CRD enforces on the server (each mirrored by
:func:`~mlops_platform.api.v1_decode.validate`, so the operator refuses what the server refuses).
Plain values and two predicates on resource names; no types.
"""

from __future__ import annotations

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

#: CEL rules of ``resources`` (mirrored by :func:`~mlops_platform.api.v1_decode.validate`)
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


#: CEL rules of ``autoscaling`` (mirrored by :func:`~mlops_platform.api.v1_decode.validate`)
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


#: a downloaded model URI that names a directory (``modeluri.ModelURI.is_prefix``): a bucket's root,
#: a path ending in '/' (for http(s): path and query, before any fragment)
DIRECTORY_URI_RE2 = r"^(s3|gs)://([^/]*/?|.*/)$|^https?://([^#]*/|[^?#]*/\?)(#.*)?$"
#: CEL rules of a ``model`` (mirrored by :func:`~mlops_platform.api.v1_decode.validate`): download
#: settings need a download
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
