"""Hypothesis strategies of valid InferenceServices of every served version, and the API server's
structural defaulting (so a generated object looks like one the server stores).

``objects(version)`` draws whole objects (metadata, spec, and sometimes status) that the version's
schema and CEL rules accept; ``defaulted(obj)`` fills in the schema defaults the way the API server
does (a default applies where the parent object exists and the field is absent).
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

from hypothesis import strategies as st

from mlops_platform.api import crd, modeluri, v1alpha1

JSON = dict[str, Any]
GROUP = v1alpha1.GROUP

_VERSIONED_URIS = (
    "s3://models/bert/7",
    "gs://bucket/iris/2/",
    "https://models.example.com/a/b/v3",
    "pvc://claim/m/1",
)
_PLAIN_URIS = ("s3://bucket", "gs://only-host", "file:///models/resnet", "pvc://claim")
_TOKENS = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,8}\Z")
_RUNTIMES = ("triton", "seldon", "torchserve")
_CUSTOM_RUNTIMES = ("vllm", "my-runtime", "t2")
_FORMATS = ("onnx", "pytorch", "tensorflow", "sklearn", "xgboost", "mlflow", "tensorrt")


@st.composite
def _quantity_pair(draw: st.DrawFn, unit: str) -> tuple[Any, Any]:
    """(request, limit), each possibly None, request <= limit when both are set; ints or strings."""
    low = draw(st.integers(0, 4000))
    high = draw(st.integers(low, 8000))

    def render(n: int) -> Any:  # the same unit on both sides: comparable without parsing
        return f"{n}{unit}" if unit else draw(st.sampled_from([n, str(n)]))

    request = draw(st.none() | st.just(render(low)))
    limit = draw(st.none() | st.just(render(high)))
    return request, limit


def _name() -> st.SearchStrategy[str]:
    return st.from_regex(r"\A[a-z]([-a-z0-9]{0,20}[a-z0-9])?\Z")


@st.composite
def metadata(draw: st.DrawFn) -> JSON:
    meta: JSON = {"name": draw(_name()), "namespace": draw(_name()), "uid": "u-1", "generation": 3}
    labels = draw(st.dictionaries(st.sampled_from(["app", "team", "tier"]), _name(), max_size=2))
    if labels:
        meta["labels"] = labels
    annotations = draw(
        st.dictionaries(st.sampled_from(["note", "example.com/owner"]), st.text(max_size=8), max_size=2)
    )
    if annotations:
        meta["annotations"] = annotations
    return meta


@st.composite
def _alerts(draw: st.DrawFn) -> JSON:
    out: JSON = {}
    if draw(st.booleans()):
        out["errorRatio"] = draw(st.sampled_from([0.01, 0.5, 1]))
    if draw(st.booleans()):
        out["latencySeconds"] = draw(st.sampled_from([0.25, 2, 10.5]))
    if draw(st.booleans()):
        out["for"] = draw(st.sampled_from(["30s", "5m", "1h30m"]))
    if draw(st.booleans()):
        out["belowMinFor"] = draw(st.sampled_from(["10m", "2h"]))
    return out


@st.composite
def _monitoring(draw: st.DrawFn) -> JSON:
    out: JSON = {}
    if draw(st.booleans()):
        out["enabled"] = draw(st.booleans())
    if draw(st.booleans()):
        out["alerts"] = draw(_alerts())
    return out


def _routing() -> st.SearchStrategy[JSON]:
    return st.one_of(
        st.just({}),
        st.builds(lambda r: {"router": r}, st.sampled_from(["auto", "istio", "gateway-api", "replicas"])),
    )


def _network_policy() -> st.SearchStrategy[JSON]:
    return st.one_of(st.just({}), st.builds(lambda e: {"enabled": e}, st.booleans()))


_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def _legacy_extensions(draw: st.DrawFn) -> JSON | None:
    """v1alpha1/v1beta1 ``extensions``: the known keys (valid, or not: the server preserves anything)
    and unknown keys."""
    if not draw(st.booleans()):
        return None
    ext: JSON = draw(st.dictionaries(st.sampled_from(["futureThing", "x-team", "notes"]), _JUNK, max_size=2))
    if draw(st.booleans()):
        ext["monitoring"] = draw(_monitoring() | _JUNK)
    if draw(st.booleans()):
        ext["networkPolicy"] = draw(_network_policy() | _JUNK)
    if draw(st.booleans()):
        ext["traffic"] = draw(_routing() | _JUNK)
    if draw(st.booleans()):
        ext["storage"] = draw(_storage_extension() | _JUNK)
    return ext


def _with_legacy_extensions(draw: st.DrawFn, spec: JSON) -> JSON:
    """``spec`` (v1alpha1, v1beta1) with the ``extensions`` drawn, if any."""
    ext = draw(_legacy_extensions())
    if ext is not None:
        spec["extensions"] = ext
    return spec


_SHA256 = ("0" * 64, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
_REMOTE_URI = re.compile(r"^(s3|gs|https?)://")


@st.composite
def _storage(draw: st.DrawFn, uri: str) -> JSON:
    """``model.storage`` fitting ``uri``'s scheme (the CEL rules refuse the others)."""
    out: JSON = {}
    if draw(st.booleans()):
        out["secretName"] = draw(st.sampled_from(["s3-creds", "gcs.key"]))
    if uri.startswith(("s3://", "gs://")) and draw(st.booleans()):
        out["endpoint"] = draw(st.sampled_from(["http://minio.storage:9000", "https://storage.example.com"]))
    if uri.startswith("s3://") and draw(st.booleans()):
        out["region"] = draw(st.sampled_from(["us-east-1", "eu-central-1"]))
    return out


@st.composite
def _storage_extension(draw: st.DrawFn) -> JSON:
    """v1alpha1 ``extensions.storage`` (the server checks nothing under extensions)."""
    out: JSON = draw(_storage("s3://"))
    if draw(st.booleans()):
        out["sha256"] = draw(st.sampled_from(_SHA256))
    if draw(st.booleans()):
        out["serviceAccountName"] = draw(st.sampled_from(["model-reader", "default"]))
    return out


@st.composite
def alpha_spec(draw: st.DrawFn) -> JSON:
    versioned = draw(st.booleans())
    uri = draw(st.sampled_from(_VERSIONED_URIS if versioned else _PLAIN_URIS))
    spec: JSON = {"modelUri": uri, "framework": draw(st.sampled_from(_RUNTIMES))}
    if draw(st.booleans()):
        spec["port"] = draw(st.sampled_from([8080, 9000, 65535]))
    low = draw(st.integers(0, 5))
    if draw(st.booleans()):
        spec["minReplicas"] = low
    if draw(st.booleans()):
        spec["maxReplicas"] = draw(st.integers(max(low, 1), 10))
    elif low > 1 and "minReplicas" in spec:
        spec["maxReplicas"] = low
    if draw(st.booleans()):
        spec["gpuPerReplica"] = draw(st.integers(0, 16))
    if draw(st.booleans()):
        cpu, memory = draw(_quantity_pair("m")), draw(_quantity_pair("Mi"))
        res = {
            k: v
            for k, v in (
                ("cpuRequest", cpu[0]),
                ("cpuLimit", cpu[1]),
                ("memoryRequest", memory[0]),
                ("memoryLimit", memory[1]),
            )
            if v is not None
        }
        spec["resources"] = res
    if draw(st.booleans()):
        traffic: JSON = {}
        if draw(st.booleans()):
            token = versioned and draw(st.booleans())
            traffic["canaryVersion"] = (
                draw(_TOKENS) if token else draw(st.sampled_from(_VERSIONED_URIS + _PLAIN_URIS))
            )
        if draw(st.booleans()):
            traffic["canaryPercent"] = draw(st.integers(0, 100)) if "canaryVersion" in traffic else 0
        spec["traffic"] = traffic
    return _with_legacy_extensions(draw, spec)


@st.composite
def _model(draw: st.DrawFn) -> JSON:
    model: JSON = {"uri": draw(st.sampled_from(_VERSIONED_URIS + _PLAIN_URIS))}
    if draw(st.booleans()):
        model["format"] = draw(st.sampled_from(_FORMATS))
    if _REMOTE_URI.match(model["uri"]):
        if not modeluri.parse(model["uri"]).is_prefix and draw(st.booleans()):  # a file: it has a digest
            model["sha256"] = draw(st.sampled_from(_SHA256))
        if draw(st.booleans()):
            model["storage"] = draw(_storage(model["uri"]))
    return model


@st.composite
def _resources(draw: st.DrawFn) -> JSON:
    names = ["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "example.com/fpga"]
    requests: JSON = {}
    limits: JSON = {}
    for name in draw(st.lists(st.sampled_from(names), unique=True, max_size=4)):
        request, limit = draw(
            _quantity_pair("" if "/" in name else draw(st.sampled_from(["", "m", "Mi", "Gi"])))
        )
        if "/" in name and request is not None:  # an extended resource: never overcommitted
            limit = request
        if request is not None:
            requests[name] = request
        if limit is not None:
            limits[name] = limit
    out: JSON = {}
    if draw(st.booleans()) or requests:
        out["requests"] = requests
    if draw(st.booleans()) or limits:
        out["limits"] = limits
    return out


@st.composite
def _predictor(draw: st.DrawFn, version: str) -> JSON:
    p: JSON = {"model": draw(_model()), "runtime": draw(st.sampled_from(_RUNTIMES + _CUSTOM_RUNTIMES))}
    if draw(st.booleans()):
        p["port"] = draw(st.sampled_from([8080, 9000, 1]))
    if draw(st.booleans()):
        p["resources"] = draw(_resources())
    if draw(st.booleans()):
        p["serviceAccountName"] = draw(st.sampled_from(["model-reader", "default"]))
    scaling: JSON = {}
    low = draw(st.integers(0, 5))
    if draw(st.booleans()):
        scaling["minReplicas"] = low
    if draw(st.booleans()) or low > 1:
        scaling["maxReplicas"] = draw(st.integers(max(low, 1), 10))
    if version == "v1beta1":
        if draw(st.booleans()):
            scaling["targetCPUUtilization"] = draw(st.integers(1, 1000))
    else:
        if draw(st.booleans()):
            target = {
                k: draw(st.integers(1, 1000))
                for k in draw(st.lists(st.sampled_from(["cpu", "memory"]), unique=True))
            }
            scaling["targetUtilization"] = target
        if scaling.get("minReplicas") == 0 and draw(st.booleans()):
            zero: JSON = {}
            if draw(st.booleans()):
                zero["requestsPerReplica"] = draw(st.sampled_from([0.5, 10, 100.25]))
            if draw(st.booleans()):
                zero["cooldownSeconds"] = draw(st.integers(0, 86400))
            scaling["scaleToZero"] = zero
    if draw(st.booleans()) or scaling:
        p["autoscaling"] = scaling
    return p


_INTERVALS = ("10s", "30s", "1m", "2m30s", "1h", "24h")


@st.composite
def _bounds(draw: st.DrawFn, keys: tuple[str, str], values: st.SearchStrategy[float]) -> JSON:
    """One or both of ``keys`` (the schema requires at least one)."""
    chosen = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True))
    return {k: draw(values) for k in chosen}


@st.composite
def _query(draw: st.DrawFn, name: str) -> JSON:
    query = draw(
        st.sampled_from(
            [
                "sum(rate(http_errors{$(selector)}[$(window)]))",
                'max(up{namespace="$(namespace)", job="$(name)"})',
                "avg(x{$(stableSelector)})",
                "vector(1)",
            ]
        )
    )
    comparison = draw(st.sampled_from(["LessThan", "LessThanOrEqual", "GreaterThan", "GreaterThanOrEqual"]))
    return {
        "name": name,
        "query": query,
        "comparison": comparison,
        "threshold": draw(st.sampled_from([0, 0.5, 3])),
    }


@st.composite
def _analysis(draw: st.DrawFn) -> JSON:
    """``spec.canary.analysis`` (v1beta1, v1): not decreasing weights, at least one check."""
    weights = sorted(draw(st.lists(st.integers(1, 99), min_size=1, max_size=4)))
    steps: list[JSON] = []
    for weight in weights:
        step: JSON = {"weight": weight}
        if draw(st.booleans()):
            step["interval"] = draw(st.sampled_from(_INTERVALS))
        steps.append(step)
    out: JSON = {"steps": steps}
    for key, values in (
        ("interval", st.sampled_from(_INTERVALS)),
        ("minRequests", st.integers(0, 1000)),
        ("failureLimit", st.integers(1, 5)),
        ("paused", st.booleans()),
    ):
        if draw(st.booleans()):
            out[key] = draw(values)
    checks = draw(st.lists(st.sampled_from(["errorRatio", "latency", "queries"]), min_size=1, unique=True))
    if "errorRatio" in checks:
        out["errorRatio"] = draw(_bounds(("max", "maxAboveStable"), st.sampled_from([0, 0.01, 1])))
    if "latency" in checks:
        latency = draw(_bounds(("maxSeconds", "maxTimesStable"), st.sampled_from([1, 1.2, 2.5])))
        if draw(st.booleans()):
            latency["quantile"] = draw(st.sampled_from([0.5, 0.95, 0.999]))
        out["latency"] = latency
    if "queries" in checks:
        names = draw(st.lists(st.sampled_from(["errors", "p99", "saturation"]), min_size=1, unique=True))
        out["queries"] = [draw(_query(n)) for n in names]
    return out


@st.composite
def _canary(draw: st.DrawFn) -> JSON:
    canary: JSON = {"model": draw(_model())}
    if draw(st.booleans()):
        canary["analysis"] = draw(_analysis())
        if draw(st.booleans()):
            canary["trafficPercent"] = 0  # the only percent beside an analysis
    elif draw(st.booleans()):
        canary["trafficPercent"] = draw(st.integers(0, 100))
    return canary


@st.composite
def beta_spec(draw: st.DrawFn) -> JSON:
    spec: JSON = {"predictor": draw(_predictor("v1beta1"))}
    if draw(st.booleans()):
        spec["canary"] = draw(_canary())
    return _with_legacy_extensions(draw, spec)


@st.composite
def v1_spec(draw: st.DrawFn) -> JSON:
    spec: JSON = {"predictor": draw(_predictor("v1"))}
    if draw(st.booleans()):
        spec["canary"] = draw(_canary())
    if draw(st.booleans()):
        spec["monitoring"] = draw(_monitoring())
    if draw(st.booleans()):
        spec["networkPolicy"] = draw(_network_policy())
    if draw(st.booleans()):
        spec["routing"] = draw(_routing())
    if draw(st.booleans()):
        spec["extensions"] = draw(
            st.dictionaries(st.sampled_from(["futureThing", "x-team"]), _JUNK, max_size=2)
        )
    return spec


_SPECS = {"v1alpha1": alpha_spec, "v1beta1": beta_spec, "v1": v1_spec}


@st.composite
def _status(draw: st.DrawFn) -> JSON:
    return {
        "observedGeneration": draw(st.integers(0, 5)),
        "replicas": draw(st.integers(0, 5)),
        "conditions": [
            {
                "type": "Ready",
                "status": draw(st.sampled_from(["True", "False"])),
                "reason": "Serving",
                "message": "m",
            }
        ],
    }


@st.composite
def objects(draw: st.DrawFn, version: str, *, default: bool | None = None) -> JSON:
    """A valid object of ``version``; ``default`` True: as the API server stores it (schema defaults
    filled in), False: as a client may send it, None: either."""
    obj: JSON = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": v1alpha1.KIND,
        "metadata": draw(metadata()),
        "spec": draw(_SPECS[version]()),
    }
    if draw(st.booleans()):
        obj["status"] = draw(_status())
    if default is None:
        default = draw(st.booleans())
    return defaulted(obj) if default else obj


@functools.cache
def _schemas() -> dict[str, JSON]:
    return {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd.crd_manifest()["spec"]["versions"]}


def defaulted(obj: JSON) -> JSON:
    """``obj`` with its version's schema defaults applied, as the API server applies them."""
    version = str(obj["apiVersion"]).rpartition("/")[2]
    out = copy.deepcopy(obj)
    _apply_defaults(_schemas()[version], out)
    return out


def _apply_defaults(schema: JSON, value: Any) -> None:
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for item in value.values():
                _apply_defaults(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _apply_defaults(schema["items"], item)
