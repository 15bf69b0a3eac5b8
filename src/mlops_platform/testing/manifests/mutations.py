"""The invalid manifests of :mod:`mlops_platform.testing.manifests`: each mutation is a Hypothesis
strategy that takes one valid object (:func:`~mlops_platform.testing.manifests.objects.base`) and makes
ONE thing about it invalid, returning the :class:`~mlops_platform.testing.manifests.objects.Invalid`
with the path the API server's answer must name. :func:`invalid` draws a version, an object and a
mutation that applies to it (:data:`MUTATIONS`).

Contract: the draws of each strategy are made in a fixed order, so a seed draws the same manifests
run after run (the reliability suite reports and replays by seed).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from mlops_platform.api import v1_rules
from mlops_platform.testing import conversion
from mlops_platform.testing.manifests import fields, objects, values

_P = fields.PREDICTOR


@st.composite
def _field_mutation(draw: st.DrawFn, version: str, obj: objects.JSON) -> objects.Invalid:
    field = draw(st.sampled_from(fields.FIELDS[version]))
    if field.needs:
        objects.merge(obj, field.needs)
    wrong_type = field.bad is None or draw(st.booleans())
    if wrong_type:
        value = draw(values.not_of_type(field.json_type))
        category = "wrong-type"
    else:
        assert field.bad is not None
        value = draw(field.bad())
        category = field.category
    objects.set_path(obj, field.path, value)
    return objects.Invalid(category, version, objects.dotted(field.path), obj, values.short(value))


@st.composite
def _quantity_map(draw: st.DrawFn, version: str, obj: objects.JSON) -> objects.Invalid:
    """v1beta1/v1 ``resources.requests|limits``: a bad value, a bad key, too many keys."""
    part = draw(st.sampled_from(["requests", "limits"]))
    path = (*_P, "resources", part)
    choice = draw(st.sampled_from(["value", "key", "many"]))
    if choice == "value":
        name = draw(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "example.com/fpga"]))
        value = draw(values.bad_quantity())
        objects.set_path(obj, (*path, name), value)
        return objects.Invalid(
            "bad-quantity", version, objects.dotted(path), obj, f"{name}: {values.short(value)}"
        )
    if choice == "key":
        key = draw(
            st.sampled_from(["", "c p u", "Cpu/x", "c\u0440u", "a" * 254, "example.com/", "-cpu", "/gpu"])
        )
        objects.set_path(obj, (*path, key), "1")
        category = "unicode-label" if not key.isascii() else "bad-string"
        return objects.Invalid(category, version, objects.dotted(path), obj, f"key {values.short(key)}")
    count = draw(st.integers(v1_rules.MAX_RESOURCES + 1, v1_rules.MAX_RESOURCES + 200))
    objects.set_path(obj, path, {f"example.com/r{i}": "1" for i in range(count)})
    return objects.Invalid("huge", version, objects.dotted(path), obj, f"{count} resource names")


@st.composite
def _unknown_field(draw: st.DrawFn, version: str, obj: objects.JSON) -> objects.Invalid:
    at = draw(st.sampled_from(fields.OBJECTS[version]))
    target: Any = obj
    for key in at:
        target = target.setdefault(key, {})
    known = set(target)
    name = draw(st.from_regex(r"\A[a-z][a-zA-Z0-9]{0,15}\Z").filter(
        lambda n: n not in known and n not in _known_keys(version, at)))  # fmt: skip
    target[name] = draw(st.one_of(st.integers(0, 9), st.text(max_size=4), st.booleans()))
    return objects.Invalid("unknown-field", version, objects.dotted((*at, name)), obj, f"{name}", strict=True)


def _known_keys(version: str, at: fields.Path) -> set[str]:
    schema = conversion._schemas()[version]  # the generated schema of the version
    for key in at:
        schema = schema["properties"][key]
    return set(schema.get("properties") or {})


@st.composite
def _metadata(draw: st.DrawFn, version: str, obj: objects.JSON) -> objects.Invalid:
    choice = draw(st.sampled_from(["name", "label-value", "label-key", "annotations", "annotation-key"]))
    meta = obj["metadata"]
    if choice == "name":
        name = draw(st.sampled_from(values.BAD_NAMES))
        meta["name"] = name
        return objects.Invalid("unicode-name", version, "metadata.name", obj, values.short(name))
    if choice == "label-value":
        value = draw(st.sampled_from(values.BAD_LABEL_VALUES))
        meta.setdefault("labels", {})["app"] = value
        return objects.Invalid("unicode-label", version, "metadata.labels", obj, f"app={values.short(value)}")
    if choice == "label-key":
        key = draw(st.sampled_from(values.BAD_LABEL_KEYS))
        meta.setdefault("labels", {})[key] = "x"
        return objects.Invalid("unicode-label", version, "metadata.labels", obj, f"{values.short(key)}=x")
    if choice == "annotation-key":
        key = draw(st.sampled_from(values.BAD_LABEL_KEYS[:-1]))
        meta.setdefault("annotations", {})[key] = "x"
        return objects.Invalid(
            "unicode-label", version, "metadata.annotations", obj, f"{values.short(key)}=x"
        )
    # over 256 KiB of annotations, up to the request limit
    size = draw(st.integers(objects.ANNOTATIONS_LIMIT + 1, objects.REQUEST_LIMIT - objects.HUGE_MARGIN))
    pieces = draw(st.integers(1, 4))
    meta["annotations"] = {f"example.com/note-{i}": "n" * (size // pieces) for i in range(pieces)}
    return objects.Invalid("huge", version, "metadata.annotations", obj, f"{size} bytes of annotations")


def _huge_paths(version: str) -> tuple[tuple[fields.Path, int, str], ...]:
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
def _huge(draw: st.DrawFn, version: str, obj: objects.JSON) -> objects.Invalid:
    """A string far over its maxLength: just over, ~1 MiB (etcd's limit is 1.5 MiB), or close to the
    API server's 3 MiB request limit."""
    path, max_length, prefix = draw(st.sampled_from(_huge_paths(version)))
    length = draw(
        st.one_of(
            st.integers(max_length + 1, max_length + 10),
            st.integers(1 << 20, 3 << 19),
            st.integers(
                objects.REQUEST_LIMIT - 4 * objects.HUGE_MARGIN,
                objects.REQUEST_LIMIT - 2 * objects.HUGE_MARGIN,
            ),
        )
    )
    if path[-1] == "endpoint":
        objects.set_path(obj, (*_P, "model"), {"uri": "s3://models/x"})
    objects.set_path(obj, path, prefix + "a" * (length - len(prefix)))
    return objects.Invalid("huge", version, objects.dotted(path), obj, f"{length} characters")


@st.composite
def _cross_field(draw: st.DrawFn, version: str, obj: objects.JSON) -> objects.Invalid:
    """A CEL rule broken: each field valid on its own."""
    if version == "v1alpha1":
        return _cross_field_alpha(draw, version, obj)
    predictor = obj["spec"]["predictor"]
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
    cases += list(_ANALYSIS_CASES)
    case = draw(st.sampled_from(cases))
    if case in _ANALYSIS_CASES:
        return _broken_analysis(version, obj, case)
    if case in ("replicas", "scale-to-zero"):
        return _broken_scaling(draw, version, obj, predictor, case)
    if case in ("resources", "extended"):
        return _broken_resources(draw, version, obj, predictor, case)
    return _broken_model(draw, version, obj, predictor["model"], case)


#: the analysis' CEL rules (issue 42): case -> (the field named, what is broken); the query
#: variables are the operator's to check (CEL cannot), so they are no case here
_ANALYSIS_CASES = {
    "analysis-weights": ("spec.canary.analysis.steps", "weights 50 then 10"),
    "analysis-percent": ("spec.canary.trafficPercent", "trafficPercent 10 beside an analysis"),
    "analysis-no-check": ("spec.canary.analysis", "no check"),
    "analysis-error-ratio": ("spec.canary.analysis.errorRatio", "errorRatio without a bound"),
    "analysis-latency": ("spec.canary.analysis.latency", "latency without a bound"),
}


def _broken_analysis(version: str, obj: objects.JSON, case: str) -> objects.Invalid:
    objects.merge(obj, fields.WITH_ANALYSIS)
    canary = obj["spec"]["canary"]
    canary["analysis"] = a = copy.deepcopy(fields.ANALYSIS)  # not merged with a drawn one (its queries)
    if case == "analysis-weights":
        a["steps"] = [{"weight": 50}, {"weight": 10}]
    elif case == "analysis-percent":
        canary["trafficPercent"] = 10
    elif case == "analysis-no-check":
        del a["errorRatio"], a["latency"]
    elif case == "analysis-error-ratio":
        a["errorRatio"] = {}
    else:
        a["latency"] = {"quantile": 0.9}
    field, what = _ANALYSIS_CASES[case]
    return objects.Invalid("cross-field", version, field, obj, what)


def _cross_field_alpha(draw: st.DrawFn, version: str, obj: objects.JSON) -> objects.Invalid:
    """v1alpha1's CEL rules: replicas, a canary without a version, a canary of a model URI that is
    only a host, a request over its limit."""
    spec = obj["spec"]
    case = draw(st.sampled_from(["replicas", "canary", "cpu", "memory", "token"]))
    if case == "replicas":
        low = draw(st.integers(2, 1000))
        spec.update(minReplicas=low, maxReplicas=draw(st.integers(1, low - 1)))
        return objects.Invalid("cross-field", version, "spec.minReplicas", obj, "minReplicas > maxReplicas")
    if case == "canary":
        spec["traffic"] = {"canaryPercent": draw(st.integers(1, 100))}
        return objects.Invalid(
            "cross-field", version, "spec.traffic.canaryVersion", obj, "canaryPercent, no version"
        )
    if case == "token":
        spec["modelUri"] = draw(st.sampled_from(["s3://bucket", "gs://only-host"]))
        spec["traffic"] = {"canaryVersion": "8", "canaryPercent": 5}
        return objects.Invalid(
            "cross-field", version, "spec.traffic.canaryVersion", obj, "token without a path"
        )
    request, limit = ("cpuRequest", "cpuLimit") if case == "cpu" else ("memoryRequest", "memoryLimit")
    high = draw(st.integers(2, 10**6))
    spec["resources"] = {request: f"{high}Mi", limit: f"{draw(st.integers(1, high - 1))}Mi"}
    return objects.Invalid("cross-field", version, f"spec.resources.{request}", obj, f"{request} > {limit}")


#: where the v1beta1/v1 cross-field rules are
_WHERE = "spec.predictor"


def _broken_scaling(
    draw: st.DrawFn, version: str, obj: objects.JSON, predictor: objects.JSON, case: str
) -> objects.Invalid:
    """``minReplicas`` over ``maxReplicas`` (``replicas``), or ``scaleToZero`` with ``minReplicas``
    over 0 (``scale-to-zero``, v1)."""
    where = _WHERE
    if case == "replicas":
        low = draw(st.integers(2, 1000))
        predictor["autoscaling"] = {"minReplicas": low, "maxReplicas": draw(st.integers(1, low - 1))}
        return objects.Invalid("cross-field", version, f"{where}.autoscaling.minReplicas", obj, "min > max")
    predictor["autoscaling"] = {
        "minReplicas": draw(st.integers(1, 2)),
        "maxReplicas": 3,
        "scaleToZero": {},
    }
    return objects.Invalid(
        "cross-field", version, f"{where}.autoscaling.scaleToZero", obj, "scaleToZero, min > 0"
    )


def _broken_resources(
    draw: st.DrawFn, version: str, obj: objects.JSON, predictor: objects.JSON, case: str
) -> objects.Invalid:
    """A request over its limit (``resources``); an extended resource requested below its limit,
    without a limit, or in fractions (``extended``)."""
    where = _WHERE
    if case == "resources":
        name = draw(st.sampled_from(["cpu", "memory", "example.com/fpga"]))
        high = draw(st.integers(2, 10**6))
        predictor["resources"] = {"requests": {name: high}, "limits": {name: draw(st.integers(1, high - 1))}}
        return objects.Invalid(
            "cross-field", version, f"{where}.resources.requests", obj, f"{name} request > limit"
        )
    # Kubernetes never overcommits an extended resource, and counts whole units
    name = draw(st.sampled_from(["nvidia.com/gpu", "example.com/fpga"]))
    count = draw(st.integers(1, 16))
    kind = draw(st.sampled_from(["below", "no-limit", "fraction"]))
    if kind == "fraction":
        part = draw(st.sampled_from(["requests", "limits"]))
        predictor["resources"] = {part: {name: f"{count * 1000 + 500}m"}}
        return objects.Invalid(
            "cross-field", version, f"{where}.resources.{part}", obj, f"{name} in fractions"
        )
    limits = {name: count + draw(st.integers(1, 16))} if kind == "below" else {}
    predictor["resources"] = {"requests": {name: count}, "limits": limits}
    return objects.Invalid("cross-field", version, f"{where}.resources.requests", obj, f"{name} {kind}")


def _broken_model(
    draw: st.DrawFn, version: str, obj: objects.JSON, model: objects.JSON, case: str
) -> objects.Invalid:
    """A model setting its URI does not take: a digest of a directory or of a local model, storage
    settings of a local model, an endpoint for https://, a region for gs://."""
    where = _WHERE
    if case == "sha256-directory":
        model.clear()
        model.update(uri=draw(st.sampled_from(["s3://bucket", "gs://b/models/", "https://h/m/", "s3://b/"])))
        model["sha256"] = "0" * 64
        return objects.Invalid(
            "cross-field", version, f"{where}.model.sha256", obj, f"sha256 of {model['uri']}"
        )
    if case in ("sha256-local", "storage-local"):
        model.clear()
        model["uri"] = draw(st.sampled_from(["pvc://claim/m", "file:///models/m"]))
        field = "sha256" if case == "sha256-local" else "storage"
        model[field] = "0" * 64 if field == "sha256" else {"secretName": "creds"}
        return objects.Invalid(
            "cross-field", version, f"{where}.model.{field}", obj, f"{field} of {model['uri']}"
        )
    if case == "endpoint-http":
        model.clear()
        model.update(uri="https://host/m.tar", storage={"endpoint": "https://minio:9000"})
        return objects.Invalid(
            "cross-field", version, f"{where}.model.storage.endpoint", obj, "endpoint of https://"
        )
    model.clear()
    model.update(uri="gs://bucket/m", storage={"region": "eu-west-1"})
    return objects.Invalid("cross-field", version, f"{where}.model.storage.region", obj, "region of gs://")


MUTATIONS: tuple[tuple[Callable[..., st.SearchStrategy[objects.Invalid]], frozenset[str]], ...] = (
    (_field_mutation, frozenset(objects.VERSIONS)),
    (_quantity_map, frozenset({"v1beta1", "v1"})),
    (_unknown_field, frozenset(objects.VERSIONS)),
    (_metadata, frozenset(objects.VERSIONS)),
    (_huge, frozenset(objects.VERSIONS)),
    (_cross_field, frozenset(objects.VERSIONS)),
)


@st.composite
def invalid(draw: st.DrawFn, *, huge: bool = True) -> objects.Invalid:
    """One :class:`Invalid` manifest of any served version (``huge``: sizes near the API server's
    limits among them)."""
    version = draw(st.sampled_from(objects.VERSIONS))
    obj = draw(objects.base(version))
    mutations = [m for m, versions in MUTATIONS if version in versions and (huge or m is not _huge)]
    mutation = draw(st.sampled_from(mutations))
    drawn: objects.Invalid = draw(mutation(version, obj))
    return drawn
