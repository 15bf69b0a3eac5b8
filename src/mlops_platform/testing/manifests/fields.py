"""The fields of each served version's schema that :mod:`mlops_platform.testing.manifests` makes
invalid (:data:`FIELDS`), each with its objects.JSON type and how to break it within that type, and the
objects of each version that take no unknown field (:data:`OBJECTS`). The tables follow the
generated schemas (``api.v1``, ``api.v1alpha1``): a bound changed there is changed here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from mlops_platform.api import internal, v1_analysis, v1_rules
from mlops_platform.testing.manifests import objects, values

Path = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Field:
    """A field of a version's schema: where, its objects.JSON type and how to make it invalid."""

    path: Path
    json_type: str  # integer, number, string, boolean, object, quantity (int-or-string)
    bad: Callable[[], st.SearchStrategy[Any]] | None = None  # values of the right type, out of bounds
    category: str = "out-of-range"
    needs: objects.JSON | None = None  # siblings it needs to be checked at all (a canary's model)


def _ints(lo: int, hi: int) -> Callable[[], st.SearchStrategy[Any]]:
    return lambda: values.out_of_range(lo, hi)


def _strings(pattern: str | None, max_length: int, *samples: str) -> Callable[[], st.SearchStrategy[Any]]:
    def bad() -> st.SearchStrategy[Any]:
        options: list[st.SearchStrategy[Any]] = [st.just("x" * (max_length + 1))]
        if samples:
            options.append(st.sampled_from(samples))
        if pattern is not None:
            options.append(values.text_not_matching(pattern))
        return st.one_of(options)

    return bad


_ALPHA: tuple[Field, ...] = (
    Field(("spec", "port"), "integer", _ints(1, 65535)),
    Field(("spec", "minReplicas"), "integer", _ints(0, 1000)),
    Field(("spec", "maxReplicas"), "integer", _ints(1, 1000)),
    Field(("spec", "gpuPerReplica"), "integer", _ints(0, 16)),
    Field(("spec", "traffic", "canaryPercent"), "integer", _ints(0, 100)),
    Field(
        ("spec", "framework"),
        "string",
        lambda: st.text(max_size=12).filter(lambda s: s not in ("triton", "seldon", "torchserve")),
        "bad-string",
    ),
    Field(("spec", "modelUri"), "string", values.bad_uri, "bad-uri"),
    Field(
        ("spec", "traffic", "canaryVersion"),
        "string",
        lambda: st.sampled_from(["", "a/b", "ftp://host/m", "x" * 64, "v 2", "-v2", "v\u00e92"]),
        "bad-string",
    ),
    *(
        Field(("spec", "resources", q), "quantity", values.bad_quantity, "bad-quantity")
        for q in ("cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit")
    ),
    Field(("spec", "resources"), "object"),
    Field(("spec", "traffic"), "object"),
    Field(("spec", "extensions"), "object"),
    Field(("spec",), "object"),
)

PREDICTOR: Path = ("spec", "predictor")
_P = PREDICTOR
_MODEL_OF_CANARY: objects.JSON = {"model": {"uri": "s3://models/bert/8"}}


def _model_fields(at: Path, needs: objects.JSON | None = None) -> tuple[Field, ...]:
    return (
        Field((*at, "uri"), "string", values.bad_uri, "bad-uri", needs),
        Field((*at, "format"), "string", _strings(v1_rules.FORMAT_PATTERN, 63, "ONNX", "py torch"),
               "bad-string", needs),
        Field((*at, "sha256"), "string", _strings(v1_rules.SHA256_PATTERN, 64, "A" * 64, "0" * 63),
               "bad-string", needs),
        Field((*at, "storage", "secretName"), "string",
               _strings(v1_rules.SUBDOMAIN_PATTERN, 253, "My_Secret"), "bad-string", needs),
        Field((*at, "storage", "endpoint"), "string",
               _strings(v1_rules.ENDPOINT_PATTERN, 2048, "ftp://minio", "http://", "minio:9000",
                        "http://a b"),
               "bad-uri", needs),
        Field((*at, "storage", "region"), "string", _strings(v1_rules.REGION_PATTERN, 63, "-east", "eu west"),
               "bad-string", needs),
        Field(at, "object", None, "out-of-range", needs),
    )  # fmt: skip


#: a valid analysis (issue 42) with every check, beside which one field is made invalid
ANALYSIS: objects.JSON = {
    "steps": [{"weight": 10}, {"weight": 50}],
    "errorRatio": {"max": 0.05, "maxAboveStable": 0.01},
    "latency": {"maxSeconds": 0.5, "maxTimesStable": 1.5},
}
WITH_ANALYSIS: objects.JSON = {
    "spec": {"canary": {**_MODEL_OF_CANARY, "trafficPercent": 0, "analysis": ANALYSIS}}
}
_A: Path = ("spec", "canary", "analysis")


def _fractions(
    lo: float, hi: float, *, open_lo: bool = False, open_hi: bool = False
) -> Callable[[], st.SearchStrategy[Any]]:
    """Numbers outside [lo, hi] (or the open ends themselves)."""

    def bad() -> st.SearchStrategy[Any]:
        below = st.floats(max_value=lo, exclude_max=not open_lo, allow_nan=False, allow_infinity=False)
        above = st.floats(min_value=hi, exclude_min=not open_hi, allow_nan=False, allow_infinity=False)
        return st.one_of(below, above)

    return bad


def _analysis_fields() -> tuple[Field, ...]:
    """``spec.canary.analysis`` (v1beta1, v1): its bounds and types, beside a valid analysis."""
    w = WITH_ANALYSIS
    return (
        Field((*_A, "interval"), "string",
              _strings(v1_analysis.INTERVAL_PATTERN, 16, "", "5s", "9s", "25h", "1h1h", "5x", "1.5m"),
              "bad-string", w),
        Field((*_A, "minRequests"), "integer", _ints(0, 1_000_000), "out-of-range", w),
        Field((*_A, "failureLimit"), "integer", _ints(1, 100), "out-of-range", w),
        Field((*_A, "paused"), "boolean", None, "wrong-type", w),
        Field((*_A, "errorRatio", "max"), "number", _fractions(0, 1), "out-of-range", w),
        Field((*_A, "errorRatio", "maxAboveStable"), "number", _fractions(0, 1), "out-of-range", w),
        Field((*_A, "latency", "quantile"), "number", _fractions(0, 1, open_lo=True, open_hi=True),
              "out-of-range", w),
        Field((*_A, "latency", "maxSeconds"), "number",
              lambda: st.floats(max_value=0, allow_nan=False, allow_infinity=False), "out-of-range", w),
        Field((*_A, "latency", "maxTimesStable"), "number", _fractions(1, 100), "out-of-range", w),
        Field((*_A, "steps"), "array", None, "wrong-type", w),
        Field((*_A, "errorRatio"), "object", None, "wrong-type", w),
        Field((*_A, "latency"), "object", None, "wrong-type", w),
        Field(_A, "object", None, "wrong-type", w),
    )  # fmt: skip


def _hub_fields(version: str) -> tuple[Field, ...]:
    fields: list[Field] = [
        *_analysis_fields(),
        *_model_fields((*_P, "model")),
        *_model_fields(("spec", "canary", "model"), {"spec": {"canary": _MODEL_OF_CANARY}}),
        Field((*_P, "runtime"), "string", _strings(v1_rules.RUNTIME_PATTERN, 63, "Triton", "my_runtime"),
               "bad-string"),
        Field((*_P, "port"), "integer", _ints(1, 65535)),
        Field((*_P, "serviceAccountName"), "string", _strings(v1_rules.SUBDOMAIN_PATTERN, 253, "Reader"),
               "bad-string"),
        Field((*_P, "autoscaling", "minReplicas"), "integer", _ints(0, 1000)),
        Field((*_P, "autoscaling", "maxReplicas"), "integer", _ints(1, 1000)),
        Field(("spec", "canary", "trafficPercent"), "integer", _ints(0, 100), "out-of-range",
               {"spec": {"canary": _MODEL_OF_CANARY}}),
        Field((*_P, "resources", "requests"), "object"),
        Field((*_P, "resources", "limits"), "object"),
        Field((*_P, "resources"), "object"),
        Field((*_P, "autoscaling"), "object"),
        Field(_P, "object"),
        Field(("spec", "canary"), "object"),
        Field(("spec", "extensions"), "object"),
    ]  # fmt: skip
    if version == "v1beta1":
        fields.append(Field((*_P, "autoscaling", "targetCPUUtilization"), "integer", _ints(1, 1000)))
    else:
        fields += [
            Field((*_P, "autoscaling", "targetUtilization", "cpu"), "integer", _ints(1, 1000)),
            Field((*_P, "autoscaling", "targetUtilization", "memory"), "integer", _ints(1, 1000)),
            Field(
                (*_P, "autoscaling", "scaleToZero", "requestsPerReplica"),
                "number",
                lambda: st.one_of(st.floats(max_value=0, allow_nan=False, allow_infinity=False),
                                  st.integers(-(values.INT64 - 1), 0)),
                "out-of-range",
                {"spec": {"predictor": {"autoscaling": {"minReplicas": 0}}}},
            ),
            Field((*_P, "autoscaling", "scaleToZero", "cooldownSeconds"), "integer", _ints(0, 86400),
                   "out-of-range", {"spec": {"predictor": {"autoscaling": {"minReplicas": 0}}}}),
            Field(("spec", "monitoring", "enabled"), "boolean"),
            Field(("spec", "networkPolicy", "enabled"), "boolean"),
            Field(("spec", "monitoring", "alerts", "errorRatio"), "number",
                   lambda: st.one_of(st.floats(max_value=0, allow_nan=False, allow_infinity=False),
                                     st.floats(min_value=1, exclude_min=True, allow_infinity=False))),
            Field(("spec", "monitoring", "alerts", "latencySeconds"), "number",
                   lambda: st.floats(max_value=0, allow_nan=False, allow_infinity=False)),
            Field(("spec", "monitoring", "alerts", "for"), "string",
                   _strings(internal.DURATION_PATTERN, 32, "", "5x", "1h1h", "-5m", "5 m", "5M"),
                   "bad-string"),
            Field(("spec", "monitoring", "alerts", "belowMinFor"), "string",
                   _strings(internal.DURATION_PATTERN, 32, "", "ten minutes", "1.5h"), "bad-string"),
            Field(("spec", "routing", "router"), "string",
                   lambda: st.text(max_size=12).filter(lambda s: s not in ("auto", "istio", "gateway-api",
                                                                           "replicas")), "bad-string"),
            Field(("spec", "monitoring"), "object"),
            Field(("spec", "routing"), "object"),
        ]  # fmt: skip
    return tuple(fields)


FIELDS: dict[str, tuple[Field, ...]] = {
    "v1alpha1": _ALPHA,
    "v1beta1": _hub_fields("v1beta1"),
    "v1": _hub_fields("v1"),
}

#: the objects of each version that take no unknown field (where one is added); the root too
OBJECTS: dict[str, tuple[Path, ...]] = {
    "v1alpha1": ((), ("spec",), ("spec", "resources"), ("spec", "traffic")),
    "v1beta1": ((), ("spec",), _P, (*_P, "model"), (*_P, "model", "storage"), (*_P, "resources"),
                (*_P, "autoscaling"), ("spec", "canary")),
    "v1": ((), ("spec",), _P, (*_P, "model"), (*_P, "model", "storage"), (*_P, "resources"),
           (*_P, "autoscaling"), (*_P, "autoscaling", "targetUtilization"), ("spec", "canary"),
           ("spec", "monitoring"), ("spec", "monitoring", "alerts"), ("spec", "routing")),
}  # fmt: skip
