"""Hypothesis strategies of hostile InferenceService manifests, for the reliability suite's scenario 9
(``tests/reliability/test_hostile_input.py``).

- :func:`invalid` draws :class:`Invalid` manifests of every served version: one valid object (from
  :mod:`mlops_platform.testing.conversion`) with ONE field made invalid, and the path of that field
  as the API server names it in its answer (``spec.port``, ``spec.predictor.resources.requests``,
  ``metadata.name``). The categories (:data:`CATEGORIES`): wrong JSON types, numbers out of range,
  bad quantities, strings and maps far over their bounds (the biggest close to the API server's
  3 MiB request limit), unknown fields (rejected with ``fieldValidation=Strict``), bad model URIs
  and endpoints, unicode tricks in names, labels and annotations, and cross-field (CEL) rules.
  Every one of them is invalid by the API's own contract: :func:`mlops_platform.api.decode` (the
  operator's reading of an object) refuses it too.
- :func:`valid` draws valid objects of every served version with at most :data:`MAX_REPLICAS`
  replicas (the local cluster runs their pods on kwok nodes), named by the caller.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from mlops_platform.api import internal, v1, v1alpha1
from mlops_platform.runtime import quantity
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import conversion, conversionload, isvc

JSON = dict[str, Any]
VERSIONS = ("v1alpha1", "v1beta1", "v1")
#: the REST resource of each version
RESOURCES: dict[str, rclient.Resource] = {
    "v1alpha1": isvc.RESOURCE,
    "v1beta1": conversionload.BETA,
    "v1": rclient.Resource(v1.GROUP, v1.VERSION, v1alpha1.PLURAL, v1.KIND),
}
#: the categories of :class:`Invalid` manifests
CATEGORIES = (
    "wrong-type",
    "out-of-range",
    "bad-quantity",
    "huge",
    "unknown-field",
    "bad-uri",
    "unicode-name",
    "unicode-label",
    "cross-field",
    "bad-string",
)
#: replicas of a :func:`valid` object (its pods run on the local cluster's kwok nodes)
MAX_REPLICAS = 2
#: the API server's limit of one request body (``--max-request-bytes`` does not change it: 3 MiB)
REQUEST_LIMIT = 3 * 1024 * 1024
#: how close to :data:`REQUEST_LIMIT` the biggest manifests get (their JSON, in bytes)
HUGE_MARGIN = 64 * 1024
#: metadata.annotations: at most 256 KiB in all (keys and values)
ANNOTATIONS_LIMIT = 256 * 1024


def version_of(obj: JSON) -> str:
    """The API version of a manifest (``v1alpha1``, ``v1beta1``, ``v1``)."""
    return str(obj["apiVersion"]).rpartition("/")[2]


@dataclasses.dataclass(frozen=True)
class Invalid:
    """A manifest the API server must refuse, naming ``field``."""

    category: str
    version: str
    field: str  # the path the answer must name, as the server writes it
    obj: JSON
    what: str  # the value or change, short (for the report)
    strict: bool = False  # an error only with fieldValidation=Strict (an unknown field)

    @property
    def size(self) -> int:
        return len(json.dumps(self.obj))

    def describe(self) -> str:
        return f"{self.version} {self.category} {self.field}: {self.what}"


# -- values ----------------------------------------------------------------------------------------

_INT64 = 2**63
_WRONG_TYPES: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=8),
    "boolean": st.booleans(),
    "array": st.lists(st.integers(0, 9), max_size=3),
    "object": st.dictionaries(st.sampled_from(["a", "value"]), st.integers(0, 9), max_size=2),
    "number": st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not float(f).is_integer()),
    "integer": st.integers(-(2**31), 2**31),
}


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else f"{text[:40]}...({len(text)} chars)"


def _not(json_type: str) -> st.SearchStrategy[Any]:
    """A value of any JSON type but ``json_type``: an integer is a number too, and an integer field
    also gets its digits in a string (an integral float is an integer in JSON: not drawn). A
    ``quantity`` is int-or-string (``x-kubernetes-int-or-string``): neither is a wrong type."""
    excluded = {
        "number": {"number", "integer"},
        "quantity": {"string", "integer"},
    }.get(json_type, {json_type})
    others = [s for name, s in _WRONG_TYPES.items() if name not in excluded]
    if json_type == "integer":
        others.append(st.integers(-1000, 100000).map(str))
    return st.one_of(others)


def _out_of_range(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers just outside [lo, hi], far outside, and at the edges of int64."""
    return st.one_of(
        st.integers(lo - 5, lo - 1),
        st.integers(hi + 1, hi + 5),
        st.integers(-(_INT64 - 1), lo - 1),
        st.integers(hi + 1, _INT64 - 1),
        st.sampled_from([-(_INT64 - 1), _INT64 - 1]),
    )


#: quantities the pattern and Kubernetes' parser refuse; unicode digits and spaces among them ("1."
#: is not one: apimachinery's ParseQuantity reads it as 1, an empty fraction, and so does the pattern)
BAD_QUANTITY_SAMPLES = (
    "lots", "-1", "1.5.5", "", " 1", "1 ", "1Ki ", "Infinity", "NaN", "0x10", "1_000", "1e", "e3",
    "1KiB", "1mi", "+", "--1", "\u0661", "\uff11", "1\u00a0Gi", "1\u200bGi", "1ki", "1Kb",
)  # fmt: skip


def _bad_quantity() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(BAD_QUANTITY_SAMPLES),
        st.text(min_size=1, max_size=12).filter(lambda s: not quantity.is_quantity(s)),
        st.integers(-(_INT64 - 1), -1),
        st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not float(f).is_integer()),
        st.booleans(),
        st.just("1" * 65),  # over the 64 characters a quantity may have
    )


def _text_not_matching(pattern: str, *, max_size: int = 20) -> st.SearchStrategy[str]:
    regex = re.compile(pattern)
    return st.text(max_size=max_size).filter(lambda s: regex.search(s) is None)


# -- bad model URIs: the schema's pattern and modeluri.parse --------------------------------------

_BAD_URIS = (
    "ftp://host/m",
    "s3:/bucket/m",
    "bucket/model",
    "s3://",
    "S3://bucket/m",
    "s3://bucket/../m",
    "s3://bucket/a/./m",
    "gs://Bucket/m",
    "gs://bu\u0441ket/m",  # a Cyrillic 's'
    "s3://bucket/m odel",
    "s3://bucket/m\tx",
    "s3://bucket/m\n",
    "s3://b_/m",
    "s3://-bucket/m",
    "pvc://Claim/m",
    "pvc://claim_1/m",
    "pvc://claim/../m",
    "file://relative/path",
    "file:///",
    "file:///models/../etc",
    "https://",
    "https:///m",
    "https://host",
    "https://host/",
    "http://host?x=1",
)


def _uri_mutation() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(_BAD_URIS),
        # anything with a scheme the operator does not download from
        st.from_regex(r"\A[a-z]{2,6}://[a-z]{1,8}/[a-z]{1,8}\Z").filter(
            lambda u: not re.match(v1alpha1.MODEL_URI_PATTERN, u)
        ),
    )


# -- names and labels --------------------------------------------------------------------------------

_BAD_NAMES = (
    "Model",
    "m\u043edel",  # a Cyrillic 'o'
    "mo\u200bdel",  # a zero-width space
    "ab\u202ecd",  # a right-to-left override
    "model\u0301",  # a combining accent
    "\uff4d\uff4f\uff44\uff45\uff4c",  # fullwidth letters
    "m\u00f6del",
    "model-",
    "-model",
    "1model",
    "my.model",
    "my_model",
    "a" * 54,
    "a" * 254,
    "\U0001f916",
)
_BAD_LABEL_VALUES = ("m\u043edel", "a\u200bb", "-x", "x-", "a b", "a" * 64, "\u00e9", "a/b", "\U0001f916")
_BAD_LABEL_KEYS = ("a b", "m\u043edel", "-x", "example.com/", "/x", "a" * 64, "Example.com/x\u200b", "a/b/c")


# -- the field tables ---------------------------------------------------------------------------------

Path = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class _Field:
    """A field of a version's schema: where, its JSON type and how to make it invalid."""

    path: Path
    json_type: str  # integer, number, string, boolean, object, quantity (int-or-string)
    bad: Callable[[], st.SearchStrategy[Any]] | None = None  # values of the right type, out of bounds
    category: str = "out-of-range"
    needs: JSON | None = None  # siblings it needs to be checked at all (a canary's model)


def _ints(lo: int, hi: int) -> Callable[[], st.SearchStrategy[Any]]:
    return lambda: _out_of_range(lo, hi)


def _strings(pattern: str | None, max_length: int, *samples: str) -> Callable[[], st.SearchStrategy[Any]]:
    def bad() -> st.SearchStrategy[Any]:
        options: list[st.SearchStrategy[Any]] = [st.just("x" * (max_length + 1))]
        if samples:
            options.append(st.sampled_from(samples))
        if pattern is not None:
            options.append(_text_not_matching(pattern))
        return st.one_of(options)

    return bad


_ALPHA: tuple[_Field, ...] = (
    _Field(("spec", "port"), "integer", _ints(1, 65535)),
    _Field(("spec", "minReplicas"), "integer", _ints(0, 1000)),
    _Field(("spec", "maxReplicas"), "integer", _ints(1, 1000)),
    _Field(("spec", "gpuPerReplica"), "integer", _ints(0, 16)),
    _Field(("spec", "traffic", "canaryPercent"), "integer", _ints(0, 100)),
    _Field(
        ("spec", "framework"),
        "string",
        lambda: st.text(max_size=12).filter(lambda s: s not in ("triton", "seldon", "torchserve")),
        "bad-string",
    ),
    _Field(("spec", "modelUri"), "string", _uri_mutation, "bad-uri"),
    _Field(
        ("spec", "traffic", "canaryVersion"),
        "string",
        lambda: st.sampled_from(["", "a/b", "ftp://host/m", "x" * 64, "v 2", "-v2", "v\u00e92"]),
        "bad-string",
    ),
    *(
        _Field(("spec", "resources", q), "quantity", _bad_quantity, "bad-quantity")
        for q in ("cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit")
    ),
    _Field(("spec", "resources"), "object"),
    _Field(("spec", "traffic"), "object"),
    _Field(("spec", "extensions"), "object"),
    _Field(("spec",), "object"),
)

_P = ("spec", "predictor")
_MODEL_OF_CANARY: JSON = {"model": {"uri": "s3://models/bert/8"}}


def _model_fields(at: Path, needs: JSON | None = None) -> tuple[_Field, ...]:
    return (
        _Field((*at, "uri"), "string", _uri_mutation, "bad-uri", needs),
        _Field((*at, "format"), "string", _strings(v1.FORMAT_PATTERN, 63, "ONNX", "py torch"), "bad-string",
               needs),
        _Field((*at, "sha256"), "string", _strings(v1.SHA256_PATTERN, 64, "A" * 64, "0" * 63), "bad-string",
               needs),
        _Field((*at, "storage", "secretName"), "string", _strings(v1.SUBDOMAIN_PATTERN, 253, "My_Secret"),
               "bad-string", needs),
        _Field((*at, "storage", "endpoint"), "string",
               _strings(v1.ENDPOINT_PATTERN, 2048, "ftp://minio", "http://", "minio:9000", "http://a b"),
               "bad-uri", needs),
        _Field((*at, "storage", "region"), "string", _strings(v1.REGION_PATTERN, 63, "-east", "eu west"),
               "bad-string", needs),
        _Field(at, "object", None, "out-of-range", needs),
    )  # fmt: skip


def _hub_fields(version: str) -> tuple[_Field, ...]:
    fields: list[_Field] = [
        *_model_fields((*_P, "model")),
        *_model_fields(("spec", "canary", "model"), {"spec": {"canary": _MODEL_OF_CANARY}}),
        _Field((*_P, "runtime"), "string", _strings(v1.RUNTIME_PATTERN, 63, "Triton", "my_runtime"),
               "bad-string"),
        _Field((*_P, "port"), "integer", _ints(1, 65535)),
        _Field((*_P, "serviceAccountName"), "string", _strings(v1.SUBDOMAIN_PATTERN, 253, "Reader"),
               "bad-string"),
        _Field((*_P, "autoscaling", "minReplicas"), "integer", _ints(0, 1000)),
        _Field((*_P, "autoscaling", "maxReplicas"), "integer", _ints(1, 1000)),
        _Field(("spec", "canary", "trafficPercent"), "integer", _ints(0, 100), "out-of-range",
               {"spec": {"canary": _MODEL_OF_CANARY}}),
        _Field((*_P, "resources", "requests"), "object"),
        _Field((*_P, "resources", "limits"), "object"),
        _Field((*_P, "resources"), "object"),
        _Field((*_P, "autoscaling"), "object"),
        _Field(_P, "object"),
        _Field(("spec", "canary"), "object"),
        _Field(("spec", "extensions"), "object"),
    ]  # fmt: skip
    if version == "v1beta1":
        fields.append(_Field((*_P, "autoscaling", "targetCPUUtilization"), "integer", _ints(1, 1000)))
    else:
        fields += [
            _Field((*_P, "autoscaling", "targetUtilization", "cpu"), "integer", _ints(1, 1000)),
            _Field((*_P, "autoscaling", "targetUtilization", "memory"), "integer", _ints(1, 1000)),
            _Field(
                (*_P, "autoscaling", "scaleToZero", "requestsPerReplica"),
                "number",
                lambda: st.one_of(st.floats(max_value=0, allow_nan=False, allow_infinity=False),
                                  st.integers(-(_INT64 - 1), 0)),
                "out-of-range",
                {"spec": {"predictor": {"autoscaling": {"minReplicas": 0}}}},
            ),
            _Field((*_P, "autoscaling", "scaleToZero", "cooldownSeconds"), "integer", _ints(0, 86400),
                   "out-of-range", {"spec": {"predictor": {"autoscaling": {"minReplicas": 0}}}}),
            _Field(("spec", "monitoring", "enabled"), "boolean"),
            _Field(("spec", "networkPolicy", "enabled"), "boolean"),
            _Field(("spec", "monitoring", "alerts", "errorRatio"), "number",
                   lambda: st.one_of(st.floats(max_value=0, allow_nan=False, allow_infinity=False),
                                     st.floats(min_value=1, exclude_min=True, allow_infinity=False))),
            _Field(("spec", "monitoring", "alerts", "latencySeconds"), "number",
                   lambda: st.floats(max_value=0, allow_nan=False, allow_infinity=False)),
            _Field(("spec", "monitoring", "alerts", "for"), "string",
                   _strings(internal.DURATION_PATTERN, 32, "", "5x", "1h1h", "-5m", "5 m", "5M"),
                   "bad-string"),
            _Field(("spec", "monitoring", "alerts", "belowMinFor"), "string",
                   _strings(internal.DURATION_PATTERN, 32, "", "ten minutes", "1.5h"), "bad-string"),
            _Field(("spec", "routing", "router"), "string",
                   lambda: st.text(max_size=12).filter(lambda s: s not in ("auto", "istio", "gateway-api",
                                                                           "replicas")), "bad-string"),
            _Field(("spec", "monitoring"), "object"),
            _Field(("spec", "routing"), "object"),
        ]  # fmt: skip
    return tuple(fields)


FIELDS: dict[str, tuple[_Field, ...]] = {
    "v1alpha1": _ALPHA,
    "v1beta1": _hub_fields("v1beta1"),
    "v1": _hub_fields("v1"),
}

#: the objects of each version that take no unknown field (where one is added); the root too
_OBJECTS: dict[str, tuple[Path, ...]] = {
    "v1alpha1": ((), ("spec",), ("spec", "resources"), ("spec", "traffic")),
    "v1beta1": ((), ("spec",), _P, (*_P, "model"), (*_P, "model", "storage"), (*_P, "resources"),
                (*_P, "autoscaling"), ("spec", "canary")),
    "v1": ((), ("spec",), _P, (*_P, "model"), (*_P, "model", "storage"), (*_P, "resources"),
           (*_P, "autoscaling"), (*_P, "autoscaling", "targetUtilization"), ("spec", "canary"),
           ("spec", "monitoring"), ("spec", "monitoring", "alerts"), ("spec", "routing")),
}  # fmt: skip


# -- building ----------------------------------------------------------------------------------------


def _merge(into: JSON, extra: JSON) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _set(obj: JSON, path: Sequence[str], value: Any) -> None:
    target = obj
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = value


def _dotted(path: Sequence[str]) -> str:
    return ".".join(path)


def _clamp(obj: JSON) -> JSON:
    """At most :data:`MAX_REPLICAS` replicas (the minimum; the maximum only matters under load)."""
    spec = obj["spec"]
    scaling = spec if "modelUri" in spec else (spec.get("predictor") or {}).get("autoscaling")
    if isinstance(scaling, dict) and int(scaling.get("minReplicas", 1)) > MAX_REPLICAS:
        scaling["minReplicas"] = MAX_REPLICAS
    return obj


_NAME = st.from_regex(r"\A[a-z]([-a-z0-9]{0,20}[a-z0-9])?\Z")


@st.composite
def base(draw: st.DrawFn, version: str) -> JSON:
    """A valid object of ``version`` as a client sends it (no status, no server-set metadata)."""
    drawn = draw(conversion.objects(version, default=False))
    meta: JSON = {"name": draw(_NAME)}
    for key in ("labels", "annotations"):
        if drawn["metadata"].get(key):
            meta[key] = drawn["metadata"][key]
    return _clamp(
        {"apiVersion": drawn["apiVersion"], "kind": drawn["kind"], "metadata": meta, "spec": drawn["spec"]}
    )


#: the runtimes of the operator's built-in table (the generated objects name others too)
BUILTIN_RUNTIMES = ("triton", "seldon", "torchserve")


def _servable(obj: JSON) -> JSON:
    """``obj`` as the operator can serve it: a built-in runtime, no model format to mismatch it and
    no ``extensions`` (where the generated objects put invalid legacy settings)."""
    spec = obj["spec"]
    spec.pop("extensions", None)
    for part in ("predictor", "canary"):
        model = (spec.get(part) or {}).get("model")
        if isinstance(model, dict):
            model.pop("format", None)
    predictor = spec.get("predictor")
    if isinstance(predictor, dict) and predictor.get("runtime") not in BUILTIN_RUNTIMES:
        predictor["runtime"] = BUILTIN_RUNTIMES[len(obj["metadata"]["name"]) % len(BUILTIN_RUNTIMES)]
    return obj


@st.composite
def valid(draw: st.DrawFn, version: str | None = None) -> JSON:
    """A valid object of ``version`` (default: any served version); the caller names it. Most are
    servable by the operator's built-in runtimes; the others may name runtimes and formats it does
    not have, or carry invalid settings under ``extensions`` (which the schema lets through)."""
    obj = draw(base(version or draw(st.sampled_from(VERSIONS))))
    return _servable(obj) if draw(st.integers(0, 3)) else obj


# -- the invalid manifests -----------------------------------------------------------------------------


@st.composite
def _field_mutation(draw: st.DrawFn, version: str, obj: JSON) -> Invalid:
    field = draw(st.sampled_from(FIELDS[version]))
    if field.needs:
        _merge(obj, field.needs)
    wrong_type = field.bad is None or draw(st.booleans())
    if wrong_type:
        value = draw(_not(field.json_type))
        category = "wrong-type"
    else:
        assert field.bad is not None
        value = draw(field.bad())
        category = field.category
    _set(obj, field.path, value)
    return Invalid(category, version, _dotted(field.path), obj, _short(value))


@st.composite
def _quantity_map(draw: st.DrawFn, version: str, obj: JSON) -> Invalid:
    """v1beta1/v1 ``resources.requests|limits``: a bad value, a bad key, too many keys."""
    part = draw(st.sampled_from(["requests", "limits"]))
    path = (*_P, "resources", part)
    choice = draw(st.sampled_from(["value", "key", "many"]))
    if choice == "value":
        name = draw(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "example.com/fpga"]))
        value = draw(_bad_quantity())
        _set(obj, (*path, name), value)
        return Invalid("bad-quantity", version, _dotted(path), obj, f"{name}: {_short(value)}")
    if choice == "key":
        key = draw(
            st.sampled_from(["", "c p u", "Cpu/x", "c\u0440u", "a" * 254, "example.com/", "-cpu", "/gpu"])
        )
        _set(obj, (*path, key), "1")
        return Invalid("unicode-label" if not key.isascii() else "bad-string", version, _dotted(path), obj,
                       f"key {_short(key)}")  # fmt: skip
    count = draw(st.integers(v1.MAX_RESOURCES + 1, v1.MAX_RESOURCES + 200))
    _set(obj, path, {f"example.com/r{i}": "1" for i in range(count)})
    return Invalid("huge", version, _dotted(path), obj, f"{count} resource names")


@st.composite
def _unknown_field(draw: st.DrawFn, version: str, obj: JSON) -> Invalid:
    at = draw(st.sampled_from(_OBJECTS[version]))
    target: Any = obj
    for key in at:
        target = target.setdefault(key, {})
    known = set(target)
    name = draw(st.from_regex(r"\A[a-z][a-zA-Z0-9]{0,15}\Z").filter(
        lambda n: n not in known and n not in _known_keys(version, at)))  # fmt: skip
    target[name] = draw(st.one_of(st.integers(0, 9), st.text(max_size=4), st.booleans()))
    return Invalid("unknown-field", version, _dotted((*at, name)), obj, f"{name}", strict=True)


def _known_keys(version: str, at: Path) -> set[str]:
    schema = conversion._schemas()[version]  # the generated schema of the version
    for key in at:
        schema = schema["properties"][key]
    return set(schema.get("properties") or {})


@st.composite
def _metadata(draw: st.DrawFn, version: str, obj: JSON) -> Invalid:
    choice = draw(st.sampled_from(["name", "label-value", "label-key", "annotations", "annotation-key"]))
    meta = obj["metadata"]
    if choice == "name":
        name = draw(st.sampled_from(_BAD_NAMES))
        meta["name"] = name
        return Invalid("unicode-name", version, "metadata.name", obj, _short(name))
    if choice == "label-value":
        value = draw(st.sampled_from(_BAD_LABEL_VALUES))
        meta.setdefault("labels", {})["app"] = value
        return Invalid("unicode-label", version, "metadata.labels", obj, f"app={_short(value)}")
    if choice == "label-key":
        key = draw(st.sampled_from(_BAD_LABEL_KEYS))
        meta.setdefault("labels", {})[key] = "x"
        return Invalid("unicode-label", version, "metadata.labels", obj, f"{_short(key)}=x")
    if choice == "annotation-key":
        key = draw(st.sampled_from(_BAD_LABEL_KEYS[:-1]))
        meta.setdefault("annotations", {})[key] = "x"
        return Invalid("unicode-label", version, "metadata.annotations", obj, f"{_short(key)}=x")
    # over 256 KiB of annotations, up to the request limit
    size = draw(st.integers(ANNOTATIONS_LIMIT + 1, REQUEST_LIMIT - HUGE_MARGIN))
    pieces = draw(st.integers(1, 4))
    meta["annotations"] = {f"example.com/note-{i}": "n" * (size // pieces) for i in range(pieces)}
    return Invalid("huge", version, "metadata.annotations", obj, f"{size} bytes of annotations")


def _huge_paths(version: str) -> tuple[tuple[Path, int, str], ...]:
    """(path, maxLength, a valid prefix) of the strings a huge value goes to."""
    if version == "v1alpha1":
        return (
            (("spec", "modelUri"), 2048, "s3://models/"),
            (("spec", "traffic", "canaryVersion"), 2048, "s3://m/"),
        )
    return (
        ((*_P, "model", "uri"), 2048, "s3://models/"),
        ((*_P, "runtime"), 63, "t"),
        ((*_P, "model", "storage", "endpoint"), 2048, "https://e/"),
        ((*_P, "serviceAccountName"), 253, "a"),
    )  # fmt: skip


@st.composite
def _huge(draw: st.DrawFn, version: str, obj: JSON) -> Invalid:
    """A string far over its maxLength: just over, ~1 MiB (etcd's limit is 1.5 MiB), or close to the
    API server's 3 MiB request limit."""
    path, max_length, prefix = draw(st.sampled_from(_huge_paths(version)))
    length = draw(
        st.one_of(
            st.integers(max_length + 1, max_length + 10),
            st.integers(1 << 20, 3 << 19),
            st.integers(REQUEST_LIMIT - 4 * HUGE_MARGIN, REQUEST_LIMIT - 2 * HUGE_MARGIN),
        )
    )
    if path[-1] == "endpoint":
        _set(obj, (*_P, "model"), {"uri": "s3://models/x"})
    _set(obj, path, prefix + "a" * (length - len(prefix)))
    return Invalid("huge", version, _dotted(path), obj, f"{length} characters")


@st.composite
def _cross_field(draw: st.DrawFn, version: str, obj: JSON) -> Invalid:
    """A CEL rule broken: each field valid on its own."""
    spec = obj["spec"]
    if version == "v1alpha1":
        case = draw(st.sampled_from(["replicas", "canary", "cpu", "memory", "token"]))
        if case == "replicas":
            low = draw(st.integers(2, 1000))
            spec.update(minReplicas=low, maxReplicas=draw(st.integers(1, low - 1)))
            return Invalid("cross-field", version, "spec.minReplicas", obj, "minReplicas > maxReplicas")
        if case == "canary":
            spec["traffic"] = {"canaryPercent": draw(st.integers(1, 100))}
            return Invalid(
                "cross-field", version, "spec.traffic.canaryVersion", obj, "canaryPercent, no version"
            )
        if case == "token":
            spec["modelUri"] = draw(st.sampled_from(["s3://bucket", "gs://only-host"]))
            spec["traffic"] = {"canaryVersion": "8", "canaryPercent": 5}
            return Invalid("cross-field", version, "spec.traffic.canaryVersion", obj, "token without a path")
        request, limit = ("cpuRequest", "cpuLimit") if case == "cpu" else ("memoryRequest", "memoryLimit")
        high = draw(st.integers(2, 10**6))
        spec["resources"] = {request: f"{high}Mi", limit: f"{draw(st.integers(1, high - 1))}Mi"}
        return Invalid("cross-field", version, f"spec.resources.{request}", obj, f"{request} > {limit}")
    predictor = spec["predictor"]
    cases = [
        "replicas",
        "resources",
        "extended",
        "sha256-local",
        "sha256-directory",
        "storage-local",
        "endpoint-http",
        "region-gs",
    ]
    if version == "v1":
        cases.append("scale-to-zero")
    case = draw(st.sampled_from(cases))
    where = "spec.predictor"
    if case == "replicas":
        low = draw(st.integers(2, 1000))
        predictor["autoscaling"] = {"minReplicas": low, "maxReplicas": draw(st.integers(1, low - 1))}
        return Invalid("cross-field", version, f"{where}.autoscaling.minReplicas", obj, "min > max")
    if case == "scale-to-zero":
        predictor["autoscaling"] = {
            "minReplicas": draw(st.integers(1, 2)),
            "maxReplicas": 3,
            "scaleToZero": {},
        }
        return Invalid(
            "cross-field", version, f"{where}.autoscaling.scaleToZero", obj, "scaleToZero, min > 0"
        )
    if case == "resources":
        name = draw(st.sampled_from(["cpu", "memory", "example.com/fpga"]))
        high = draw(st.integers(2, 10**6))
        predictor["resources"] = {"requests": {name: high}, "limits": {name: draw(st.integers(1, high - 1))}}
        return Invalid("cross-field", version, f"{where}.resources.requests", obj, f"{name} request > limit")
    if case == "extended":  # Kubernetes never overcommits an extended resource, and counts whole units
        name = draw(st.sampled_from(["nvidia.com/gpu", "example.com/fpga"]))
        count = draw(st.integers(1, 16))
        kind = draw(st.sampled_from(["below", "no-limit", "fraction"]))
        if kind == "fraction":
            part = draw(st.sampled_from(["requests", "limits"]))
            predictor["resources"] = {part: {name: f"{count * 1000 + 500}m"}}
            return Invalid("cross-field", version, f"{where}.resources.{part}", obj, f"{name} in fractions")
        limits = {name: count + draw(st.integers(1, 16))} if kind == "below" else {}
        predictor["resources"] = {"requests": {name: count}, "limits": limits}
        return Invalid("cross-field", version, f"{where}.resources.requests", obj, f"{name} {kind}")
    model = predictor["model"]
    if case == "sha256-directory":
        model.clear()
        model.update(uri=draw(st.sampled_from(["s3://bucket", "gs://b/models/", "https://h/m/", "s3://b/"])))
        model["sha256"] = "0" * 64
        return Invalid("cross-field", version, f"{where}.model.sha256", obj, f"sha256 of {model['uri']}")
    if case in ("sha256-local", "storage-local"):
        model.clear()
        model["uri"] = draw(st.sampled_from(["pvc://claim/m", "file:///models/m"]))
        field = "sha256" if case == "sha256-local" else "storage"
        model[field] = "0" * 64 if field == "sha256" else {"secretName": "creds"}
        return Invalid("cross-field", version, f"{where}.model.{field}", obj, f"{field} of {model['uri']}")
    if case == "endpoint-http":
        model.clear()
        model.update(uri="https://host/m.tar", storage={"endpoint": "https://minio:9000"})
        return Invalid("cross-field", version, f"{where}.model.storage.endpoint", obj, "endpoint of https://")
    model.clear()
    model.update(uri="gs://bucket/m", storage={"region": "eu-west-1"})
    return Invalid("cross-field", version, f"{where}.model.storage.region", obj, "region of gs://")


_MUTATIONS: tuple[tuple[Callable[..., st.SearchStrategy[Invalid]], frozenset[str]], ...] = (
    (_field_mutation, frozenset(VERSIONS)),
    (_quantity_map, frozenset({"v1beta1", "v1"})),
    (_unknown_field, frozenset(VERSIONS)),
    (_metadata, frozenset(VERSIONS)),
    (_huge, frozenset(VERSIONS)),
    (_cross_field, frozenset(VERSIONS)),
)


@st.composite
def invalid(draw: st.DrawFn, *, huge: bool = True) -> Invalid:
    """One :class:`Invalid` manifest of any served version (``huge``: sizes near the API server's
    limits among them)."""
    version = draw(st.sampled_from(VERSIONS))
    obj = draw(base(version))
    mutations = [m for m, versions in _MUTATIONS if version in versions and (huge or m is not _huge)]
    mutation = draw(st.sampled_from(mutations))
    drawn: Invalid = draw(mutation(version, obj))
    return drawn
